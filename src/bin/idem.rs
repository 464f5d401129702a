//! `idem`: the operator's command-line tool for idem's SQL stores (PostgreSQL, MariaDB/MySQL,
//! SQLite). `docs/operations.md`, "The `idem` CLI".
//!
//! What the `Store` trait offers (`migrate`, `purge_expired`) goes through it; what it lacks
//! (reading a record by its key hash, statistics, operator actions) is static SQL here, one
//! statement per backend, with bind parameters only. Every "now" is the database's clock, as in
//! the stores.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Command};
use idem::key::ScopedKey;
use idem::store::{MySqlStore, PostgresStore, SqliteStore, Store};
use sqlx::{MySqlPool, PgPool, Row, SqlitePool};

type Error = Box<dyn std::error::Error>;

/// "Now" in ms since the Unix epoch by each database's clock (the stores' own expressions).
macro_rules! pg_now {
    () => {
        "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint"
    };
}
macro_rules! my_now {
    () => {
        "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)"
    };
}
macro_rules! lite_now {
    () => {
        "CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"
    };
}

/// One record, every column cast to the same Rust types on the three backends.
const PG_INSPECT: &str = concat!(
    "SELECT idem_key, state::bigint, fence, lease_until, expire_at, request_hash::text, \
       resp_status::bigint, biz_no, operation_id::text, resp_body, created_at, updated_at, ",
    pg_now!(),
    " FROM idem.idempotency_records WHERE key_hash = $1"
);
const MY_INSPECT: &str = concat!(
    "SELECT idem_key, CAST(state AS SIGNED), fence, lease_until, expire_at, request_hash, \
       CAST(resp_status AS SIGNED), biz_no, operation_id, resp_body, created_at, updated_at, ",
    my_now!(),
    " FROM idem_idempotency_records WHERE key_hash = ?"
);
const LITE_INSPECT: &str = concat!(
    "SELECT idem_key, state, fence, lease_until, expire_at, request_hash, \
       resp_status, biz_no, operation_id, resp_body, created_at, updated_at, ",
    lite_now!(),
    " FROM idem_idempotency_records WHERE key_hash = ?1"
);

/// The records `purge` would delete now.
const PG_EXPIRED: &str = concat!(
    "SELECT COUNT(*) FROM idem.idempotency_records WHERE expire_at <= ",
    pg_now!()
);
const MY_EXPIRED: &str = concat!(
    "SELECT COUNT(*) FROM idem_idempotency_records WHERE expire_at <= ",
    my_now!()
);
const LITE_EXPIRED: &str = concat!(
    "SELECT COUNT(*) FROM idem_idempotency_records WHERE expire_at <= ",
    lite_now!()
);

/// Records by state (expired ones included: they hold rows until purged).
const PG_BY_STATE: &str =
    "SELECT state::bigint, COUNT(*) FROM idem.idempotency_records GROUP BY state ORDER BY state";
const MY_BY_STATE: &str = "SELECT CAST(state AS SIGNED), COUNT(*) FROM idem_idempotency_records \
     GROUP BY state ORDER BY state";
const LITE_BY_STATE: &str =
    "SELECT state, COUNT(*) FROM idem_idempotency_records GROUP BY state ORDER BY state";

/// The oldest live processing record: its key hash, when its lease was taken, and now.
const PG_OLDEST: &str = concat!(
    "SELECT encode(key_hash, 'hex'), locked_at, ",
    pg_now!(),
    " FROM idem.idempotency_records WHERE state = 0 AND expire_at > ",
    pg_now!(),
    " ORDER BY locked_at LIMIT 1"
);
const MY_OLDEST: &str = concat!(
    "SELECT LOWER(HEX(key_hash)), locked_at, ",
    my_now!(),
    " FROM idem_idempotency_records WHERE state = 0 AND expire_at > ",
    my_now!(),
    " ORDER BY locked_at LIMIT 1"
);
const LITE_OLDEST: &str = concat!(
    "SELECT lower(hex(key_hash)), locked_at, ",
    lite_now!(),
    " FROM idem_idempotency_records WHERE state = 0 AND expire_at > ",
    lite_now!(),
    " ORDER BY locked_at LIMIT 1"
);

/// Live records expiring within the next hour and the next day.
const PG_EXPIRING: &str = concat!(
    "SELECT COUNT(*) FILTER (WHERE expire_at <= n + 3600000), COUNT(*) \
     FROM idem.idempotency_records, (SELECT ",
    pg_now!(),
    " AS n) AS t WHERE expire_at > n AND expire_at <= n + 86400000"
);
const MY_EXPIRING: &str = concat!(
    "SELECT CAST(COALESCE(SUM(expire_at <= n + 3600000), 0) AS SIGNED), COUNT(*) \
     FROM idem_idempotency_records, (SELECT ",
    my_now!(),
    " AS n) AS t WHERE expire_at > n AND expire_at <= n + 86400000"
);
const LITE_EXPIRING: &str = concat!(
    "SELECT COALESCE(SUM(expire_at <= n + 3600000), 0), COUNT(*) \
     FROM idem_idempotency_records, (SELECT ",
    lite_now!(),
    " AS n) AS t WHERE expire_at > n AND expire_at <= n + 86400000"
);

/// Table and index size in bytes (SQLite: the whole database file, and no index figure).
const PG_SIZE: &str = "SELECT pg_table_size('idem.idempotency_records'), \
     pg_indexes_size('idem.idempotency_records')";
const MY_SIZE: &str = "SELECT CAST(data_length AS SIGNED), CAST(index_length AS SIGNED) \
     FROM information_schema.tables \
     WHERE table_schema = DATABASE() AND table_name = 'idem_idempotency_records'";
const LITE_SIZE: &str =
    "SELECT page_count * page_size, -1 FROM pragma_page_count(), pragma_page_size()";

// `release` ends the lease of a processing record, like the engine's abandon: the record and its
// operation id stay, `lease_until` becomes now, and the next request with the same body takes it
// over (fence + 1, same operation id, S23), so a handler that did reach its side effects is
// recognised downstream by that id. Deleting the record instead would be safe only when the
// operator knows the handler did nothing: the next request would run under a new operation id.
// The fence guard makes both statements touch the row only as the operator saw it in `inspect`.
const PG_RELEASE: &str = concat!(
    "UPDATE idem.idempotency_records SET lease_until = LEAST(lease_until, ",
    pg_now!(),
    "), updated_at = ",
    pg_now!(),
    ", rev = rev + 1 WHERE key_hash = $1 AND fence = $2 AND state = 0"
);
const MY_RELEASE: &str = concat!(
    "UPDATE idem_idempotency_records SET lease_until = LEAST(lease_until, ",
    my_now!(),
    "), updated_at = ",
    my_now!(),
    ", rev = rev + 1 WHERE key_hash = ? AND fence = ? AND state = 0"
);
const LITE_RELEASE: &str = concat!(
    "UPDATE idem_idempotency_records SET lease_until = min(lease_until, ",
    lite_now!(),
    "), updated_at = ",
    lite_now!(),
    ", rev = rev + 1 WHERE key_hash = ?1 AND fence = ?2 AND state = 0"
);

// `expire` makes the record logically absent now (S21), whatever its state: the key is free, and
// the next claim replaces the record with a new operation id and fence + 1, which fences out a
// handler still running under the old lease. Nothing is deleted (purge does that later), so the
// row stays readable for the post-mortem until then.
const PG_EXPIRE: &str = concat!(
    "UPDATE idem.idempotency_records SET expire_at = LEAST(expire_at, ",
    pg_now!(),
    "), updated_at = ",
    pg_now!(),
    ", rev = rev + 1 WHERE key_hash = $1 AND fence = $2"
);
const MY_EXPIRE: &str = concat!(
    "UPDATE idem_idempotency_records SET expire_at = LEAST(expire_at, ",
    my_now!(),
    "), updated_at = ",
    my_now!(),
    ", rev = rev + 1 WHERE key_hash = ? AND fence = ?"
);
const LITE_EXPIRE: &str = concat!(
    "UPDATE idem_idempotency_records SET expire_at = min(expire_at, ",
    lite_now!(),
    "), updated_at = ",
    lite_now!(),
    ", rev = rev + 1 WHERE key_hash = ?1 AND fence = ?2"
);

/// idem's migration history (the table may not exist yet).
const PG_HISTORY: &str = "SELECT version, description FROM idem._sqlx_migrations ORDER BY version";
const MY_HISTORY: &str = "SELECT version, description FROM idem_sqlx_migrations ORDER BY version";
const LITE_HISTORY: &str = MY_HISTORY;

/// A connected store and its pool.
enum Db {
    Pg(PostgresStore, PgPool),
    My(MySqlStore, MySqlPool),
    Lite(SqliteStore, SqlitePool),
}

/// Runs `$body` with `$q` bound to the backend's statement and `$pool` to its pool.
macro_rules! on {
    ($db:expr, [$pg:expr, $my:expr, $lite:expr], |$q:ident, $pool:ident| $body:expr) => {
        match $db {
            Db::Pg(_, $pool) => {
                let $q = $pg;
                $body
            }
            Db::My(_, $pool) => {
                let $q = $my;
                $body
            }
            Db::Lite(_, $pool) => {
                let $q = $lite;
                $body
            }
        }
    };
}

impl Db {
    async fn connect(url: &str) -> Result<Db, Error> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let s = PostgresStore::connect(url).await?;
            let p = s.pool().clone();
            Ok(Db::Pg(s, p))
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let s = MySqlStore::connect(&url).await?;
            let p = s.pool().clone();
            Ok(Db::My(s, p))
        } else if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err("a SQLite database URL needs a file: sqlite://path/to/file.db".into());
            }
            let s = SqliteStore::open(path).await?;
            let p = s.pool().clone();
            Ok(Db::Lite(s, p))
        } else {
            Err(format!(
                "unsupported database URL `{}`: use postgres://, mysql:// (MariaDB too) or sqlite://",
                redact(url)
            )
            .into())
        }
    }

    fn store(&self) -> &dyn Store {
        match self {
            Db::Pg(s, _) => s,
            Db::My(s, _) => s,
            Db::Lite(s, _) => s,
        }
    }

    async fn history(&self) -> Vec<(i64, String)> {
        let rows: Result<Vec<(i64, String)>, sqlx::Error> =
            on!(self, [PG_HISTORY, MY_HISTORY, LITE_HISTORY], |q, pool| {
                sqlx::query_as(q).fetch_all(pool).await
            });
        // Absent before the first migration: nothing applied.
        rows.unwrap_or_default()
    }

    async fn count_expired(&self) -> Result<i64, Error> {
        Ok(on!(
            self,
            [PG_EXPIRED, MY_EXPIRED, LITE_EXPIRED],
            |q, pool| sqlx::query_scalar::<_, i64>(q).fetch_one(pool).await?
        ))
    }

    async fn inspect(&self, hash: &[u8]) -> Result<Option<Inspected>, Error> {
        macro_rules! read {
            ($row:expr) => {{
                let r = $row;
                Inspected {
                    key: r.try_get(0)?,
                    state: r.try_get(1)?,
                    fence: r.try_get(2)?,
                    lease_until: r.try_get(3)?,
                    expire_at: r.try_get(4)?,
                    request_hash: r.try_get(5)?,
                    status: r.try_get(6)?,
                    biz_no: r.try_get(7)?,
                    operation_id: r.try_get(8)?,
                    body: r.try_get(9)?,
                    created_at: r.try_get(10)?,
                    updated_at: r.try_get(11)?,
                    now: r.try_get(12)?,
                }
            }};
        }
        Ok(on!(
            self,
            [PG_INSPECT, MY_INSPECT, LITE_INSPECT],
            |q, pool| match sqlx::query(q).bind(hash).fetch_optional(pool).await? {
                Some(row) => Some(read!(row)),
                None => None,
            }
        ))
    }

    /// `release` or `expire`: the number of rows changed.
    async fn operator(&self, release: bool, hash: &[u8], fence: i64) -> Result<u64, Error> {
        let statements = if release {
            [PG_RELEASE, MY_RELEASE, LITE_RELEASE]
        } else {
            [PG_EXPIRE, MY_EXPIRE, LITE_EXPIRE]
        };
        let [pg, my, lite] = statements;
        Ok(on!(self, [pg, my, lite], |q, pool| sqlx::query(q)
            .bind(hash)
            .bind(fence)
            .execute(pool)
            .await?
            .rows_affected()))
    }

    async fn stats(&self) -> Result<Stats, Error> {
        let by_state: Vec<(i64, i64)> = on!(
            self,
            [PG_BY_STATE, MY_BY_STATE, LITE_BY_STATE],
            |q, pool| sqlx::query_as(q).fetch_all(pool).await?
        );
        let oldest: Option<(String, i64, i64)> =
            on!(self, [PG_OLDEST, MY_OLDEST, LITE_OLDEST], |q, pool| {
                sqlx::query_as(q).fetch_optional(pool).await?
            });
        let expiring: (i64, i64) = on!(
            self,
            [PG_EXPIRING, MY_EXPIRING, LITE_EXPIRING],
            |q, pool| sqlx::query_as(q).fetch_one(pool).await?
        );
        let size: (Option<i64>, Option<i64>) =
            on!(self, [PG_SIZE, MY_SIZE, LITE_SIZE], |q, pool| {
                sqlx::query_as(q).fetch_optional(pool).await?
            })
            .unwrap_or((None, None));
        Ok(Stats {
            by_state,
            oldest,
            expiring,
            size,
            expired: self.count_expired().await?,
        })
    }
}

struct Inspected {
    key: String,
    state: i64,
    fence: i64,
    lease_until: i64,
    expire_at: i64,
    request_hash: String,
    status: Option<i64>,
    biz_no: Option<String>,
    operation_id: String,
    body: Option<Vec<u8>>,
    created_at: i64,
    updated_at: i64,
    now: i64,
}

struct Stats {
    by_state: Vec<(i64, i64)>,
    oldest: Option<(String, i64, i64)>,
    expiring: (i64, i64),
    size: (Option<i64>, Option<i64>),
    expired: i64,
}

fn state_name(state: i64) -> &'static str {
    match state {
        0 => "processing",
        1 => "completed",
        2 => "failed-stored",
        _ => "unknown",
    }
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 (UTC).
fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// A signed duration in ms, as `in 1h 2m 3s` / `4s ago`.
fn relative(ms: i64) -> String {
    let mut s = ms.unsigned_abs() / 1000;
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    s %= 60;
    let text = match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m {s}s"),
        _ => format!("{d}d {h}h {m}m"),
    };
    if ms >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

fn time(ms: i64, now: i64) -> String {
    format!("{} ({})", rfc3339(ms), relative(ms - now))
}

fn key_args(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("scope")
            .long("scope")
            .value_name("PART")
            .action(ArgAction::Append)
            .help("A scope part (tenant, user, ...), in order; repeat for each"),
    )
    .arg(
        Arg::new("operation")
            .long("operation")
            .value_name("OP")
            .requires("key")
            .help("The operation the key is scoped to"),
    )
    .arg(
        Arg::new("key")
            .long("key")
            .value_name("KEY")
            .requires("operation")
            .help("The client's idempotency key"),
    )
    .arg(
        Arg::new("key-hash")
            .long("key-hash")
            .value_name("HEX")
            .conflicts_with_all(["scope", "operation", "key"])
            .help("The record's key_hash (64 hex digits, as in idem's logs)"),
    )
}

fn fence_arg(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("fence")
            .long("fence")
            .value_name("N")
            .required(true)
            .value_parser(clap::value_parser!(i64))
            .help("The fence `inspect` showed: the record is changed only if it still has it"),
    )
}

fn cli() -> Command {
    Command::new("idem")
        .about("Operate idem's idempotency records (PostgreSQL, MariaDB/MySQL, SQLite)")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .arg_required_else_help(true)
        .arg(
            Arg::new("database-url")
                .long("database-url")
                .env("DATABASE_URL")
                .value_name("URL")
                .global(true)
                .help("postgres://..., mysql://... (MariaDB too) or sqlite://path"),
        )
        .arg(
            Arg::new("json")
                .long("json")
                .global(true)
                .action(ArgAction::SetTrue)
                .help("inspect and stats: one JSON object instead of lines"),
        )
        .subcommand(
            Command::new("migrate")
                .about("Apply idem's own migrations (idempotent) and print what was applied"),
        )
        .subcommand(
            Command::new("purge")
                .about("Delete expired records in batches")
                .arg(
                    Arg::new("batch")
                        .long("batch")
                        .value_name("N")
                        .default_value("1000")
                        .value_parser(clap::value_parser!(u32).range(1..))
                        .help("Records per DELETE"),
                )
                .arg(
                    Arg::new("dry-run")
                        .long("dry-run")
                        .action(ArgAction::SetTrue)
                        .help("Only count the expired records"),
                ),
        )
        .subcommand(
            key_args(
                Command::new("inspect")
                    .about("Show one record, by scope parts + operation + key or by --key-hash"),
            )
            .arg(
                Arg::new("body")
                    .long("body")
                    .action(ArgAction::SetTrue)
                    .help("Also print the stored response body"),
            ),
        )
        .subcommand(
            Command::new("stats").about(
                "Records by state, the oldest processing record, expiries ahead, table size",
            ),
        )
        .subcommand(fence_arg(key_args(Command::new("release").about(
            "End the lease of a stuck processing record: the next retry of the same request \
             takes over, with the same operation id",
        ))))
        .subcommand(fence_arg(key_args(Command::new("expire").about(
            "Expire a record now (stuck or poisoned): the key is free, the next request runs \
             afresh under a new operation id",
        ))))
}

fn key_hash(m: &ArgMatches) -> Result<Vec<u8>, Error> {
    if let Some(hex) = m.get_one::<String>("key-hash") {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("--key-hash takes 64 hex digits".into());
        }
        return Ok((0..32)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or_default())
            .collect());
    }
    let (Some(op), Some(key)) = (m.get_one::<String>("operation"), m.get_one::<String>("key"))
    else {
        return Err(
            "name the record: --operation and --key (with --scope parts), or --key-hash".into(),
        );
    };
    let scope: Vec<&String> = m
        .get_many("scope")
        .map(Iterator::collect)
        .unwrap_or_default();
    Ok(ScopedKey::new(&scope, op, key)?.hash().to_vec())
}

/// A JSON string literal.
fn js(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An optional JSON value.
fn opt(value: Option<String>) -> String {
    value.unwrap_or_else(|| "null".to_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn run(m: ArgMatches) -> Result<(), Error> {
    let Some(url) = m.get_one::<String>("database-url") else {
        return Err("no database: pass --database-url or set DATABASE_URL".into());
    };
    let db = Db::connect(url).await?;
    let mut out = std::io::stdout().lock();
    match m.subcommand() {
        Some(("migrate", _)) => {
            let before = db.history().await;
            db.store().migrate().await?;
            let after = db.history().await;
            let mut applied = 0;
            for (version, description) in after.iter().filter(|a| !before.contains(a)) {
                writeln!(out, "applied {version} {description}")?;
                applied += 1;
            }
            if applied == 0 {
                writeln!(out, "nothing to apply: idem's schema is up to date")?;
            }
        }
        Some(("purge", sub)) => {
            let expired = db.count_expired().await?;
            if sub.get_flag("dry-run") {
                writeln!(out, "{expired} expired records would be purged (dry run)")?;
                return Ok(());
            }
            let batch = *sub.get_one::<u32>("batch").unwrap_or(&1000);
            let tty = std::io::stdout().is_terminal();
            let mut total = 0u64;
            loop {
                let n = db.store().purge_expired(batch).await?;
                total += n;
                if tty {
                    write!(out, "\rpurged {total} / ~{expired}")?;
                    out.flush()?;
                } else if n > 0 {
                    writeln!(out, "purged {n} (total {total})")?;
                }
                if n < u64::from(batch) {
                    break;
                }
            }
            if tty {
                writeln!(out)?;
            }
            writeln!(out, "purged {total} expired records")?;
        }
        Some(("inspect", sub)) => {
            let hash = key_hash(sub)?;
            let Some(r) = db.inspect(&hash).await? else {
                return Err(format!("no record with key hash {}", hex(&hash)).into());
            };
            if m.get_flag("json") {
                let body = r.body.as_deref().filter(|_| sub.get_flag("body"));
                writeln!(
                    out,
                    "{{\"key\":{},\"key_hash\":\"{}\",\"state\":\"{}\",\"expired\":{},\
                     \"fence\":{},\"operation_id\":{},\"lease_until\":\"{}\",\
                     \"expire_at\":\"{}\",\"created_at\":\"{}\",\"updated_at\":\"{}\",\
                     \"request_hash\":{},\"status\":{},\"biz_no\":{},\"body_len\":{},\"body\":{}}}",
                    js(&r.key),
                    hex(&hash),
                    state_name(r.state),
                    r.expire_at <= r.now,
                    r.fence,
                    js(&r.operation_id),
                    rfc3339(r.lease_until),
                    rfc3339(r.expire_at),
                    rfc3339(r.created_at),
                    rfc3339(r.updated_at),
                    js(r.request_hash.trim()),
                    opt(r.status.map(|s| s.to_string())),
                    opt(r.biz_no.as_deref().map(js)),
                    r.body.as_ref().map_or(0, Vec::len),
                    opt(body.map(|b| js(&String::from_utf8_lossy(b)))),
                )?;
                return Ok(());
            }
            writeln!(out, "key           {}", r.key)?;
            writeln!(out, "key hash      {}", hex(&hash))?;
            let expired = if r.expire_at <= r.now {
                " (expired)"
            } else {
                ""
            };
            writeln!(out, "state         {}{expired}", state_name(r.state))?;
            writeln!(out, "fence         {}", r.fence)?;
            writeln!(out, "operation id  {}", r.operation_id)?;
            writeln!(out, "lease until   {}", time(r.lease_until, r.now))?;
            writeln!(out, "expire at     {}", time(r.expire_at, r.now))?;
            writeln!(out, "created at    {}", time(r.created_at, r.now))?;
            writeln!(out, "updated at    {}", time(r.updated_at, r.now))?;
            writeln!(out, "request hash  {}", r.request_hash.trim())?;
            let status = r.status.map_or("-".to_owned(), |s| s.to_string());
            writeln!(out, "status        {status}")?;
            writeln!(out, "business no   {}", r.biz_no.as_deref().unwrap_or("-"))?;
            let body = r.body.unwrap_or_default();
            if sub.get_flag("body") {
                writeln!(out, "body ({} bytes):", body.len())?;
                out.write_all(&body)?;
                writeln!(out)?;
            } else {
                writeln!(out, "body          {} bytes (--body to print)", body.len())?;
            }
        }
        Some(("stats", _)) => {
            let s = db.stats().await?;
            if m.get_flag("json") {
                let count = |state| {
                    s.by_state
                        .iter()
                        .find(|(st, _)| *st == state)
                        .map_or(0, |x| x.1)
                };
                let oldest = s.oldest.as_ref().map(|(hash, locked_at, _)| {
                    format!(
                        "{{\"key_hash\":\"{hash}\",\"locked_at\":\"{}\"}}",
                        rfc3339(*locked_at)
                    )
                });
                writeln!(
                    out,
                    "{{\"processing\":{},\"completed\":{},\"failed_stored\":{},\"expired\":{},\
                     \"oldest_processing\":{},\"expiring_1h\":{},\"expiring_1d\":{},\
                     \"table_bytes\":{},\"index_bytes\":{}}}",
                    count(0),
                    count(1),
                    count(2),
                    s.expired,
                    opt(oldest),
                    s.expiring.0,
                    s.expiring.1,
                    opt(s.size.0.filter(|b| *b >= 0).map(|b| b.to_string())),
                    opt(s.size.1.filter(|b| *b >= 0).map(|b| b.to_string())),
                )?;
                return Ok(());
            }
            for state in 0..3 {
                let n = s
                    .by_state
                    .iter()
                    .find(|(st, _)| *st == state)
                    .map_or(0, |x| x.1);
                writeln!(out, "{:<14}{n}", state_name(state))?;
            }
            writeln!(out, "{:<14}{}", "expired", s.expired)?;
            match s.oldest {
                Some((hash, locked_at, now)) => writeln!(
                    out,
                    "oldest processing  {hash}, lease taken {}",
                    time(locked_at, now)
                )?,
                None => writeln!(out, "oldest processing  -")?,
            }
            writeln!(out, "expiring in 1 h    {}", s.expiring.0)?;
            writeln!(out, "expiring in 1 d    {}", s.expiring.1)?;
            let size = |b: Option<i64>| match b {
                Some(b) if b >= 0 => format!("{b} bytes"),
                _ => "-".to_owned(),
            };
            let label = match db {
                Db::Lite(..) => "database file",
                _ => "table size",
            };
            writeln!(out, "{label:<19}{}", size(s.size.0))?;
            writeln!(out, "index size         {}", size(s.size.1))?;
        }
        Some((cmd @ ("release" | "expire"), sub)) => {
            let hash = key_hash(sub)?;
            let fence = *sub.get_one::<i64>("fence").unwrap_or(&0);
            let release = cmd == "release";
            if db.operator(release, &hash, fence).await? == 1 {
                let done = if release { "lease ended" } else { "expired" };
                writeln!(out, "{done}: {} (fence {fence})", hex(&hash))?;
                return Ok(());
            }
            return Err(match db.inspect(&hash).await? {
                None => format!("no record with key hash {}", hex(&hash)),
                Some(r) if r.fence != fence => format!(
                    "the record changed since you inspected it (fence now {})",
                    r.fence
                ),
                Some(r) => format!(
                    "the record is {}, not processing: only a processing record has a lease to end",
                    state_name(r.state)
                ),
            }
            .into());
        }
        _ => unreachable!("clap requires a subcommand"),
    }
    Ok(())
}

/// The error and its causes on one line.
fn one_line(e: &Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line.replace('\n', " ")
}

fn main() -> ExitCode {
    let matches = cli().get_matches();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(matches)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}
