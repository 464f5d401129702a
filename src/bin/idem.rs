//! `idem`: the operator's command-line tool for idem's SQL stores (PostgreSQL, MariaDB/MySQL,
//! SQLite). `docs/operations.md`, "The `idem` CLI".
//!
//! What the `Store` trait offers (`migrate`, `purge_expired`) goes through it; what it lacks
//! (reading a record by its key hash, statistics, operator actions) is each store's operator
//! statements (`idem::store::<backend>::sql`), with bind parameters only. Every "now" is the
//! database's clock, the stores' own expression (`NOW_MS_SQL`). Sealed responses are opened and sealed by
//! `idem::seal` (`KeyRing::open_stored`, `KeyRing::reseal_stored`), never here.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Command};
use idem::MySqlStore;
use idem::PostgresStore;
use idem::SqliteStore;
use idem::key::ScopedKey;
use idem::seal::{Binding, KeyRing, OpenedResponse, ResealError, SealError, StoredResponse};
use idem::store::{Chain, RecordState, Store, mysql, postgres, sqlite};
use serde::{Serialize, Serializer};
use sqlx::{MySqlPool, PgPool, Row, SqlitePool};

#[path = "idem/redis.rs"]
mod on_redis;

type Error = Box<dyn std::error::Error>;

/// The operator statements of one backend (`idem::store::<backend>::sql`), with the store's own
/// table names and "now".
struct Statements {
    /// One record, every column cast to the same Rust types on the three backends.
    inspect: &'static str,
    /// The number of records `purge` would delete now.
    expired: &'static str,
    /// The oldest live processing record: its key hash, when its lease was taken, and now.
    oldest: &'static str,
    /// Live records expiring within the next hour and the next day.
    expiring: &'static str,
    /// See [`Action::Release`].
    release: &'static str,
    /// See [`Action::Expire`].
    expire: &'static str,
    /// Live stored records (completed or failed-but-stored): what `rekey` reads.
    stored: &'static str,
    /// One page of them after a key hash, in key-hash order (`rekey`).
    page: &'static str,
    /// One of them, by key hash (`rekey`, after a record changed under it).
    one: &'static str,
    /// The response of a stored record replaced while its row version is still the one read
    /// (`rekey`).
    rewrite: &'static str,
    /// Records by state (expired ones included: they hold rows until purged).
    by_state: &'static str,
    /// Table and index size in bytes (SQLite: the whole database file, and no index figure).
    size: &'static str,
    /// idem's migration history (the table may not exist yet).
    history: &'static str,
}

/// The [`Statements`] of `idem::store::$backend::sql`.
macro_rules! statements {
    ($backend:ident) => {
        Statements {
            inspect: $backend::sql::INSPECT,
            expired: $backend::sql::COUNT_EXPIRED,
            oldest: $backend::sql::OLDEST_PROCESSING,
            expiring: $backend::sql::EXPIRING,
            release: $backend::sql::END_LEASE,
            expire: $backend::sql::EXPIRE,
            stored: $backend::sql::COUNT_STORED,
            page: $backend::sql::STORED_PAGE,
            one: $backend::sql::STORED_ONE,
            rewrite: $backend::sql::REWRITE_RESPONSE,
            by_state: $backend::sql::COUNT_BY_STATE,
            size: $backend::sql::SIZE,
            history: $backend::sql::MIGRATIONS,
        }
    };
}

const PG: Statements = statements!(postgres);
const MY: Statements = statements!(mysql);
const LITE: Statements = statements!(sqlite);

/// A connected store and its pool.
enum Db {
    Pg(PostgresStore, PgPool),
    My(MySqlStore, MySqlPool),
    Lite(SqliteStore, SqlitePool),
    /// `migrate`, `purge` and `rekey` only: the other commands read SQL.
    Redis(Box<on_redis::RedisDb>),
}

/// What a command that reads SQL answers on Redis.
const SQL_ONLY: &str = "this command reads the SQL stores only: on Redis, `migrate`, `purge` \
    and `rekey` work, and a record is the hash `<prefix>rec:<key hash>` (redis-cli HGETALL)";

/// Runs `$body` with `$q` bound to the backend's statement `.field` of [`Statements`] and
/// `$pool` to its pool.
macro_rules! on {
    ($db:expr, .$field:ident, |$q:ident, $pool:ident| $body:expr) => {
        match $db {
            Db::Pg(_, $pool) => {
                let $q = PG.$field;
                $body
            }
            Db::My(_, $pool) => {
                let $q = MY.$field;
                $body
            }
            Db::Lite(_, $pool) => {
                let $q = LITE.$field;
                $body
            }
            Db::Redis(_) => return Err(SQL_ONLY.into()),
        }
    };
}

impl Db {
    async fn connect(url: &str, prefix: &str) -> Result<Db, Error> {
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
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            Ok(Db::Redis(Box::new(
                on_redis::RedisDb::connect(url, prefix).await?,
            )))
        } else {
            Err(format!(
                "unsupported database URL `{}`: use postgres://, mysql:// (MariaDB too), sqlite:// \
                 or redis://",
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
            Db::Redis(r) => &r.store,
        }
    }

    /// idem's migration history; empty before the first migration, and on Redis (no schema).
    async fn history(&self) -> Result<Vec<(i64, String)>, Error> {
        let rows: Result<Vec<(i64, String)>, sqlx::Error> = on!(self, .history, |q, pool| {
            sqlx::query_as(q).fetch_all(pool).await
        });
        // Absent before the first migration: nothing applied.
        Ok(rows.unwrap_or_default())
    }

    async fn count_expired(&self) -> Result<i64, Error> {
        Ok(on!(self, .expired, |q, pool| {
            sqlx::query_scalar::<_, i64>(q).fetch_one(pool).await?
        }))
    }

    async fn inspect(&self, hash: &[u8]) -> Result<Option<Record>, Error> {
        macro_rules! read {
            ($row:expr) => {{
                let r = $row;
                Record {
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
                    headers: r.try_get(13)?,
                }
            }};
        }
        Ok(on!(self, .inspect, |q, pool| {
            match sqlx::query(q).bind(hash).fetch_optional(pool).await? {
                Some(row) => Some(read!(row)),
                None => None,
            }
        }))
    }

    async fn count_stored(&self) -> Result<i64, Error> {
        Ok(on!(self, .stored, |q, pool| {
            sqlx::query_scalar::<_, i64>(q).fetch_one(pool).await?
        }))
    }

    /// At most `limit` live stored records with a key hash above `after`, in key-hash order.
    async fn page(&self, after: &[u8], limit: u32) -> Result<Vec<StoredRow>, Error> {
        Ok(on!(self, .page, |q, pool| {
            sqlx::query_as(q)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        }))
    }

    /// The live stored record of `hash`, if it still is one.
    async fn stored_row(&self, hash: &[u8]) -> Result<Option<StoredRow>, Error> {
        if let Db::Redis(r) = self {
            return r.stored_row(hash).await;
        }
        Ok(on!(self, .one, |q, pool| {
            sqlx::query_as(q).bind(hash).fetch_optional(pool).await?
        }))
    }

    /// Writes `new` over the response of `row`, if the row is still at the version read:
    /// whether it was.
    async fn rewrite(
        &self,
        row: &StoredRow,
        idem_key: &str,
        new: &StoredResponse,
    ) -> Result<bool, Error> {
        if let Db::Redis(r) = self {
            return r.rewrite(row, idem_key, new).await;
        }
        let n = on!(self, .rewrite, |q, pool| {
            sqlx::query(q)
                .bind(idem_key)
                .bind(&new.headers)
                .bind(&new.body)
                // Empty for a sealed response; the business number of one opened back to
                // plaintext (`rekey --unseal`).
                .bind(&new.biz_no)
                .bind(&row.key_hash)
                .bind(&row.operation_id)
                .bind(row.rev)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n == 1)
    }

    /// `release` or `expire` of the record `hash` while it is still operation `operation_id`
    /// at `fence`: the number of rows changed.
    async fn operate(
        &self,
        action: Action,
        hash: &[u8],
        operation_id: &str,
        fence: i64,
    ) -> Result<u64, Error> {
        macro_rules! run {
            ($field:ident) => {
                on!(self, .$field, |q, pool| {
                    sqlx::query(q)
                        .bind(hash)
                        .bind(operation_id)
                        .bind(fence)
                        .execute(pool)
                        .await?
                        .rows_affected()
                })
            };
        }
        Ok(match action {
            Action::Release => run!(release),
            Action::Expire => run!(expire),
        })
    }

    async fn stats(&self) -> Result<Stats, Error> {
        let by_state: Vec<(i64, i64)> = on!(self, .by_state, |q, pool| {
            sqlx::query_as(q).fetch_all(pool).await?
        });
        let count = |state| {
            by_state
                .iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |x| x.1)
        };
        let oldest: Option<(String, i64, i64)> = on!(self, .oldest, |q, pool| {
            sqlx::query_as(q).fetch_optional(pool).await?
        });
        let (expiring_1h, expiring_1d): (i64, i64) = on!(self, .expiring, |q, pool| {
            sqlx::query_as(q).fetch_one(pool).await?
        });
        let (table_bytes, index_bytes): (Option<i64>, Option<i64>) = on!(self, .size, |q, pool| {
            sqlx::query_as(q).fetch_optional(pool).await?
        })
        .unwrap_or((None, None));
        Ok(Stats {
            processing: count(0),
            completed: count(1),
            failed_stored: count(2),
            expired: self.count_expired().await?,
            oldest_processing: oldest.map(|(key_hash, locked_at, now)| Oldest {
                key_hash,
                locked_at,
                now,
            }),
            expiring_1h,
            expiring_1d,
            // SQLite has no index figure (-1).
            table_bytes: table_bytes.filter(|b| *b >= 0),
            index_bytes: index_bytes.filter(|b| *b >= 0),
        })
    }
}

/// One record as stored; times in ms since the Unix epoch, `now` the database's.
struct Record {
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
    headers: Option<Vec<u8>>,
}

impl Record {
    /// What its seal binds besides the key hash; `None` when a column does not read as the
    /// store writes it.
    fn binding(&self) -> Option<Binding> {
        binding(
            &self.operation_id,
            &self.request_hash,
            self.status,
            self.state,
        )
    }

    /// The stored response columns.
    fn response(&self) -> StoredResponse {
        StoredResponse {
            headers: self.headers.clone().unwrap_or_default(),
            body: self.body.clone().unwrap_or_default(),
            biz_no: self.biz_no.clone(),
        }
    }
}

/// What `inspect` can read of a record's response with the key ring it was given.
struct View {
    /// The key id the response is sealed under; `None` for a plaintext response.
    sealed_under: Option<String>,
    /// The opened response of a sealed record.
    opened: Option<OpenedResponse>,
    /// Why a sealed response was not opened.
    unopened: Option<String>,
}

impl View {
    fn of(record: &Record, key_hash: &[u8], ring: Option<&KeyRing>) -> View {
        let stored = record.response();
        let hash: Option<[u8; 32]> = key_hash.try_into().ok();
        let sealed_under = match stored.sealed_under() {
            Ok(id) => id,
            Err(e) => {
                return View {
                    sealed_under: None,
                    opened: None,
                    unopened: Some(e.to_string()),
                };
            }
        };
        if sealed_under.is_none() {
            return View {
                sealed_under,
                opened: None,
                unopened: None,
            };
        }
        let (opened, unopened) = match (ring, hash, record.binding()) {
            (None, _, _) => (None, Some(NO_RING.to_owned())),
            (Some(ring), Some(hash), Some(binding)) => {
                match ring.open_stored(&hash, &binding, &stored) {
                    Ok(o) => (Some(o), None),
                    Err(e) => (None, Some(e.to_string())),
                }
            }
            (Some(_), None, _) => (None, Some("a key hash that is not 32 bytes".to_owned())),
            (Some(_), _, None) => (None, Some(UNBOUND.to_owned())),
        };
        View {
            sealed_under,
            opened,
            unopened,
        }
    }
}

/// What a sealed response's binding is made of, from a record's columns: `None` when the
/// request hash is not 64 hex digits, or the status or state out of their ranges.
fn binding(
    operation_id: &str,
    request_hash: &str,
    status: Option<i64>,
    state: i64,
) -> Option<Binding> {
    Some(Binding {
        operation_id: operation_id.to_owned(),
        request_hash: request_hash.trim().parse().ok()?,
        status: u16::try_from(status?).ok()?,
        state: RecordState::from_code(state)?,
    })
}

/// Why a response cannot be opened when the columns its seal binds do not read.
const UNBOUND: &str = "the request hash, status or state column does not read as idem writes it:     the record was altered";

/// What `inspect` says of a sealed response without a key ring.
const NO_RING: &str = "the response is sealed: give the key ring (IDEM_ENCRYPTION_KEYS or \
    --keys-file) to read it";

/// A stored record as `rekey` reads it.
#[derive(sqlx::FromRow)]
struct StoredRow {
    key_hash: Vec<u8>,
    idem_key: String,
    /// The `request_hash`, `resp_status` and `state` columns: with the operation id, what the
    /// seal binds.
    request_hash: String,
    resp_status: Option<i64>,
    state: i64,
    /// The operation the response belongs to: with `rev`, the guard of the rewrite (a record
    /// purged and claimed afresh restarts `rev` at 1, under a new operation id).
    operation_id: String,
    /// The row version, +1 on every write: the guard of the rewrite.
    rev: i64,
    resp_headers: Option<Vec<u8>>,
    resp_body: Option<Vec<u8>>,
    biz_no: Option<String>,
}

/// `inspect --json`.
#[derive(Serialize)]
struct RecordJson<'a> {
    key: &'a str,
    key_hash: &'a str,
    state: &'static str,
    expired: bool,
    fence: i64,
    operation_id: &'a str,
    #[serde(serialize_with = "as_rfc3339")]
    lease_until: i64,
    #[serde(serialize_with = "as_rfc3339")]
    expire_at: i64,
    #[serde(serialize_with = "as_rfc3339")]
    created_at: i64,
    #[serde(serialize_with = "as_rfc3339")]
    updated_at: i64,
    request_hash: &'a str,
    status: Option<i64>,
    biz_no: Option<&'a str>,
    /// The key id its response is sealed under; `None` for a plaintext response.
    sealed_under: Option<&'a str>,
    /// For a sealed response, why it could not be read: no key ring given, or the error.
    unopened: Option<String>,
    body_len: usize,
    /// With `--body` only.
    body: Option<Cow<'a, str>>,
}

impl Record {
    fn expired(&self) -> bool {
        self.expire_at <= self.now
    }

    fn json<'a>(&'a self, key_hash: &'a str, with_body: bool, view: &'a View) -> RecordJson<'a> {
        let (biz_no, body) = match &view.opened {
            Some(o) => (o.biz_no.as_deref(), Some(&o.body)),
            None if view.sealed_under.is_some() => (None, None),
            None => (self.biz_no.as_deref(), self.body.as_ref()),
        };
        RecordJson {
            key: &self.key,
            key_hash,
            state: state_name(self.state),
            expired: self.expired(),
            fence: self.fence,
            operation_id: &self.operation_id,
            lease_until: self.lease_until,
            expire_at: self.expire_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            request_hash: self.request_hash.trim(),
            status: self.status,
            biz_no,
            sealed_under: view.sealed_under.as_deref(),
            unopened: view.unopened.clone(),
            body_len: body.map_or(0, Vec::len),
            body: body
                .filter(|_| with_body)
                .map(|b| String::from_utf8_lossy(b)),
        }
    }
}

/// What `stats` shows; `stats --json` as it is.
#[derive(Serialize)]
struct Stats {
    processing: i64,
    completed: i64,
    failed_stored: i64,
    expired: i64,
    oldest_processing: Option<Oldest>,
    expiring_1h: i64,
    expiring_1d: i64,
    table_bytes: Option<i64>,
    index_bytes: Option<i64>,
}

/// The oldest live processing record.
#[derive(Serialize)]
struct Oldest {
    key_hash: String,
    #[serde(serialize_with = "as_rfc3339")]
    locked_at: i64,
    /// The database's clock, for the relative time.
    #[serde(skip)]
    now: i64,
}

/// The operator's actions on one record, guarded by its operation id and fence: both touch the
/// row only as the operator saw it in `inspect`. The fence alone would not do, since a record
/// purged and claimed afresh starts again at fence 1 (S25).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Ends the lease of a processing record, like the engine's abandon: the record and its
    /// operation id stay, `lease_until` becomes now, and the next request with the same body
    /// takes it over (fence + 1, same operation id, S23), so a handler that did reach its side
    /// effects is recognised downstream by that id. Deleting the record instead would be safe
    /// only when the operator knows the handler did nothing: the next request would run under a
    /// new operation id.
    Release,
    /// Makes the record logically absent now (S21), whatever its state: the key is free, and the
    /// next claim replaces the record with a new operation id and fence + 1, which fences out a
    /// handler still running under the old lease. Nothing is deleted (purge does that later), so
    /// the row stays readable for the post-mortem until then.
    Expire,
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

/// Milliseconds since the Unix epoch as RFC 3339 (UTC, always three decimals); a time past
/// the year 9999 (a corrupt row) as its number.
fn rfc3339(ms: i64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'_>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::UtcDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| format!("{ms} ms since the Unix epoch"))
}

fn as_rfc3339<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*ms))
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

/// The record as `inspect` showed it: its operation id (which a record purged and claimed
/// afresh does not keep) and its fence (which a takeover moves on).
fn identity_args(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("operation-id")
            .long("operation-id")
            .value_name("ID")
            .required(true)
            .help(
                "The operation id `inspect` showed: the record is changed only if it is still \
                 that operation",
            ),
    )
    .arg(
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
        .about(
            "Operate idem's idempotency records (PostgreSQL, MariaDB/MySQL, SQLite; Redis for \
             migrate, purge and rekey)",
        )
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
        .arg(
            Arg::new("redis-prefix")
                .long("redis-prefix")
                .value_name("PREFIX")
                .global(true)
                .help(
                    "Redis: the store's key prefix (`RedisStore::with_prefix`), idem: unless set",
                ),
        )
        .arg(
            Arg::new("keys-file")
                .long("keys-file")
                .value_name("PATH")
                .global(true)
                .help(
                    "inspect and rekey: a file holding the key ring, ID:BASE64,... with the \
                     primary first (or set IDEM_ENCRYPTION_KEYS)",
                ),
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
            Command::new("rekey")
                .about(
                    "Seal every stored response under the key ring's primary key (plaintext \
                     ones too), in batches; safe while the service runs, resumable",
                )
                .arg(
                    Arg::new("batch")
                        .long("batch")
                        .value_name("N")
                        .default_value("500")
                        .value_parser(clap::value_parser!(u32).range(1..))
                        .help("Records read per statement"),
                )
                .arg(
                    Arg::new("after")
                        .long("after")
                        .value_name("HEX")
                        .help("Start after this key hash (the last one a stopped run printed)"),
                )
                .arg(
                    Arg::new("dry-run")
                        .long("dry-run")
                        .action(ArgAction::SetTrue)
                        .help("Only count what would be sealed"),
                )
                .arg(
                    Arg::new("accept-plaintext")
                        .long("accept-plaintext")
                        .action(ArgAction::SetTrue)
                        .conflicts_with("unseal")
                        .help(
                            "Seal plaintext records and records sealed in format 1 too (while \
                             switching encryption on); without it they are named as not opening",
                        ),
                )
                .arg(
                    Arg::new("unseal")
                        .long("unseal")
                        .action(ArgAction::SetTrue)
                        .help(
                            "Open every sealed response back to plaintext instead, with the \
                             ring's keys (switching encryption off)",
                        ),
                ),
        )
        .subcommand(
            Command::new("stats").about(
                "Records by state, the oldest processing record, expiries ahead, table size",
            ),
        )
        .subcommand(identity_args(key_args(Command::new("release").about(
            "End the lease of a stuck processing record: the next retry of the same request \
             takes over, with the same operation id",
        ))))
        .subcommand(identity_args(key_args(Command::new("expire").about(
            "Expire a record now (stuck or poisoned): the key is free, the next request runs \
             afresh under a new operation id",
        ))))
}

fn key_hash(m: &ArgMatches) -> Result<Vec<u8>, Error> {
    if let Some(hex) = m.get_one::<String>("key-hash") {
        return parse_hash(hex, "--key-hash");
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

/// A key hash given as 64 hex digits to the option `option`.
fn parse_hash(hex: &str, option: &str) -> Result<Vec<u8>, Error> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{option} takes 64 hex digits").into());
    }
    Ok((0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or_default())
        .collect())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `idem migrate`: applies idem's migrations, prints each one applied.
async fn migrate(db: &Db, out: &mut impl Write) -> Result<(), Error> {
    let before = db.history().await.unwrap_or_default();
    db.store().migrate().await?;
    let after = db.history().await.unwrap_or_default();
    let mut applied = 0;
    for (version, description) in after.iter().filter(|a| !before.contains(a)) {
        writeln!(out, "applied {version} {description}")?;
        applied += 1;
    }
    if applied == 0 {
        writeln!(out, "nothing to apply: idem's schema is up to date")?;
    }
    Ok(())
}

/// `idem purge`: deletes expired records `--batch` at a time, with progress.
async fn purge(db: &Db, m: &ArgMatches, out: &mut impl Write) -> Result<(), Error> {
    let expired = db.count_expired().await?;
    if m.get_flag("dry-run") {
        writeln!(out, "{expired} expired records would be purged (dry run)")?;
        return Ok(());
    }
    let batch = *m.get_one::<u32>("batch").unwrap_or(&1000);
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
    Ok(())
}

/// `idem inspect`: one record, as lines or (`--json`) one object.
async fn inspect(
    db: &Db,
    m: &ArgMatches,
    ring: Option<&KeyRing>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Error> {
    let hash = key_hash(m)?;
    let key_hash = hex(&hash);
    let Some(r) = db.inspect(&hash).await? else {
        return Err(format!("no record with key hash {key_hash}").into());
    };
    let with_body = m.get_flag("body");
    let view = View::of(&r, &hash, ring);
    if json {
        serde_json::to_writer(&mut *out, &r.json(&key_hash, with_body, &view))?;
        writeln!(out)?;
        return Ok(());
    }
    let expired = if r.expired() { " (expired)" } else { "" };
    writeln!(out, "key           {}", r.key)?;
    writeln!(out, "key hash      {key_hash}")?;
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
    if let Some(id) = &view.sealed_under {
        writeln!(out, "sealed under  key `{id}`")?;
    }
    if let Some(why) = &view.unopened {
        writeln!(out, "unreadable    {why}")?;
        writeln!(out, "business no   -")?;
        let len = r.body.as_ref().map_or(0, Vec::len);
        writeln!(out, "body          {len} bytes sealed")?;
        return Ok(());
    }
    let (biz_no, body) = match view.opened {
        Some(o) => (o.biz_no, o.body),
        None => (r.biz_no, r.body.unwrap_or_default()),
    };
    writeln!(out, "business no   {}", biz_no.as_deref().unwrap_or("-"))?;
    if with_body {
        writeln!(out, "body ({} bytes):", body.len())?;
        out.write_all(&body)?;
        writeln!(out)?;
    } else {
        writeln!(out, "body          {} bytes (--body to print)", body.len())?;
    }
    Ok(())
}

/// `idem stats`: counts, the oldest processing record, expiries ahead, sizes.
async fn stats(db: &Db, json: bool, out: &mut impl Write) -> Result<(), Error> {
    let s = db.stats().await?;
    if json {
        serde_json::to_writer(&mut *out, &s)?;
        writeln!(out)?;
        return Ok(());
    }
    for (state, n) in [(0, s.processing), (1, s.completed), (2, s.failed_stored)] {
        writeln!(out, "{:<14}{n}", state_name(state))?;
    }
    writeln!(out, "{:<14}{}", "expired", s.expired)?;
    match s.oldest_processing {
        Some(o) => writeln!(
            out,
            "oldest processing  {}, lease taken {}",
            o.key_hash,
            time(o.locked_at, o.now)
        )?,
        None => writeln!(out, "oldest processing  -")?,
    }
    writeln!(out, "expiring in 1 h    {}", s.expiring_1h)?;
    writeln!(out, "expiring in 1 d    {}", s.expiring_1d)?;
    let size = |b: Option<i64>| b.map_or("-".to_owned(), |b| format!("{b} bytes"));
    let label = match db {
        Db::Lite(..) => "database file",
        _ => "table size",
    };
    writeln!(out, "{label:<19}{}", size(s.table_bytes))?;
    writeln!(out, "index size         {}", size(s.index_bytes))?;
    Ok(())
}

/// `idem release` / `idem expire`: the action on the record while it is still the operation
/// `--operation-id` at `--fence`; otherwise, why not. Never by the fence alone: a record purged
/// and claimed afresh starts again at fence 1, under another operation.
async fn operate(
    db: &Db,
    m: &ArgMatches,
    action: Action,
    out: &mut impl Write,
) -> Result<(), Error> {
    let hash = key_hash(m)?;
    let fence = *m.get_one::<i64>("fence").unwrap_or(&0);
    let operation_id = m
        .get_one::<String>("operation-id")
        .map_or("", String::as_str);
    if db.operate(action, &hash, operation_id, fence).await? == 1 {
        let done = match action {
            Action::Release => "lease ended",
            Action::Expire => "expired",
        };
        writeln!(out, "{done}: {} (fence {fence})", hex(&hash))?;
        return Ok(());
    }
    Err(match db.inspect(&hash).await? {
        None => format!("no record with key hash {}", hex(&hash)),
        Some(r) if r.operation_id != operation_id => format!(
            "the record is another operation since you inspected it (operation id now {}): \
             the one you saw is gone; inspect it again",
            r.operation_id
        ),
        Some(r) if r.fence != fence => format!(
            "the record changed since you inspected it (fence now {})",
            r.fence
        ),
        Some(r) => format!(
            "the record is {}, not processing: only a processing record has a lease to end",
            state_name(r.state)
        ),
    }
    .into())
}

/// The key ring of `--keys-file` or `IDEM_ENCRYPTION_KEYS` (`ID:BASE64,...`, the primary
/// first), if either is given. Never from the command line, where every user of the machine
/// could read it.
fn key_ring(m: &ArgMatches) -> Result<Option<KeyRing>, Error> {
    let (list, from) = match m.get_one::<String>("keys-file") {
        Some(path) => {
            let list = std::fs::read_to_string(path)
                .map_err(|e| format!("--keys-file {path}: cannot read it: {e}"))?;
            (list, format!("--keys-file {path}"))
        }
        None => match std::env::var("IDEM_ENCRYPTION_KEYS") {
            Ok(list) if !list.trim().is_empty() => (list, "IDEM_ENCRYPTION_KEYS".to_owned()),
            _ => return Ok(None),
        },
    };
    KeyRing::parse(&list)
        .map(Some)
        .map_err(|e| format!("{from}: {e}").into())
}

/// What `rekey` did, or with `--dry-run` would do.
#[derive(Default)]
struct Rekeyed {
    scanned: u64,
    /// Sealed under the primary by this run (with `--dry-run`: to be).
    resealed: u64,
    /// Of those, records that were plaintext.
    from_plaintext: u64,
    /// Already under the primary.
    current: u64,
    /// Changed by the service at each of our attempts: left to it.
    busy: u64,
    /// Records that do not open, with the first few key hashes and reasons.
    unopened: u64,
    first_unopened: Vec<(String, SealError)>,
}

/// How many times `rekey` reads a record again when the service wrote it between the read and
/// the rewrite.
const REKEY_ATTEMPTS: u32 = 3;

/// `idem rekey`: seals every live stored record under the key ring's primary key, `--batch` at
/// a time in key-hash order (so `--after` resumes where a run stopped), each rewrite guarded by
/// the row version read, so that it never overwrites what the service wrote meanwhile.
async fn rekey(
    db: &Db,
    m: &ArgMatches,
    ring: Option<&KeyRing>,
    out: &mut impl Write,
) -> Result<(), Error> {
    let Some(ring) = ring else {
        return Err(
            "rekey needs the key ring: set IDEM_ENCRYPTION_KEYS or pass --keys-file \
            (ID:BASE64,..., the new primary first, every older key after it)"
                .into(),
        );
    };
    let modal;
    let ring = if m.get_flag("unseal") {
        modal = ring.clone().sealing_nothing();
        &modal
    } else if m.get_flag("accept-plaintext") {
        modal = ring.clone().accepting_plaintext();
        &modal
    } else {
        ring
    };
    let batch = *m.get_one::<u32>("batch").unwrap_or(&500);
    let dry_run = m.get_flag("dry-run");
    let mut cursor = match m.get_one::<String>("after") {
        Some(_) if matches!(db, Db::Redis(_)) => {
            return Err(
                "--after is for the SQL stores: on Redis, run rekey again (records \
                already under the primary are only read)"
                    .into(),
            );
        }
        Some(h) => parse_hash(h, "--after")?,
        None => Vec::new(),
    };
    let mut scan = match db {
        Db::Redis(r) => Some(r.scan().await?),
        _ => None,
    };
    let total = match db {
        Db::Redis(_) => "?".to_owned(),
        _ => db.count_stored().await?.to_string(),
    };
    let tty = std::io::stdout().is_terminal();
    let mut done = Rekeyed::default();
    loop {
        let rows = match (db, &mut scan) {
            (Db::Redis(r), Some(scan)) => match r.next_page(scan, batch).await? {
                Some(rows) => rows,
                None => break,
            },
            _ => {
                let rows = db.page(&cursor, batch).await?;
                let Some(last) = rows.last() else { break };
                cursor = last.key_hash.clone();
                rows
            }
        };
        let before = done.resealed;
        for row in rows {
            rekey_one(db, ring, row, dry_run, &mut done).await?;
        }
        if tty {
            write!(
                out,
                "\rscanned {} / ~{total}, resealed {}",
                done.scanned, done.resealed
            )?;
            out.flush()?;
        } else if scan.is_some() {
            writeln!(
                out,
                "resealed {} (total {})",
                done.resealed - before,
                done.resealed
            )?;
        } else {
            writeln!(
                out,
                "resealed {} (total {}), up to key hash {}",
                done.resealed - before,
                done.resealed,
                hex(&cursor)
            )?;
        }
    }
    if tty && done.scanned > 0 {
        writeln!(out)?;
    }
    let verb = if dry_run { "would reseal" } else { "resealed" };
    if ring.seals() {
        writeln!(
            out,
            "{verb} {} of {} stored records under key `{}` ({} of them plaintext); {} already \
             were",
            done.resealed,
            done.scanned,
            ring.primary(),
            done.from_plaintext,
            done.current
        )?;
    } else {
        let verb = if dry_run { "would open" } else { "opened" };
        writeln!(
            out,
            "{verb} {} of {} stored records back to plaintext; {} already were",
            done.resealed, done.scanned, done.current
        )?;
    }
    if done.busy > 0 {
        writeln!(
            out,
            "{} records changed at each attempt and were left to the service, which seals what \
             it writes: run rekey again to check",
            done.busy
        )?;
    }
    if let Some((hash, why)) = done.first_unopened.first() {
        return Err(format!(
            "{} records do not open and were left as they are (first: {hash}: {why}); see them \
             with `idem inspect --key-hash`",
            done.unopened
        )
        .into());
    }
    Ok(())
}

/// One record of `rekey`: re-read and tried again while the service writes it in between.
async fn rekey_one(
    db: &Db,
    ring: &KeyRing,
    mut row: StoredRow,
    dry_run: bool,
    done: &mut Rekeyed,
) -> Result<(), Error> {
    done.scanned += 1;
    for _ in 0..REKEY_ATTEMPTS {
        let stored = StoredResponse {
            headers: row.resp_headers.take().unwrap_or_default(),
            body: row.resp_body.take().unwrap_or_default(),
            biz_no: row.biz_no.take(),
        };
        let hash: [u8; 32] = row.key_hash.as_slice().try_into()?;
        let plaintext = matches!(stored.sealed_under(), Ok(None));
        let Some(binding) = binding(
            &row.operation_id,
            &row.request_hash,
            row.resp_status,
            row.state,
        ) else {
            done.unopened += 1;
            if done.first_unopened.len() < 5 {
                done.first_unopened
                    .push((hex(&hash), SealError::Malformed(UNBOUND.to_owned())));
            }
            return Ok(());
        };
        let new = match ring.reseal_stored(&hash, &binding, &stored) {
            Ok(Some(new)) => new,
            Ok(None) => {
                done.current += 1;
                return Ok(());
            }
            Err(ResealError::Open(e)) => {
                done.unopened += 1;
                if done.first_unopened.len() < 5 {
                    done.first_unopened.push((hex(&hash), e));
                }
                return Ok(());
            }
            Err(e @ ResealError::Random(_)) => return Err(e.into()),
        };
        let key = if plaintext && ring.seals() {
            // As an encrypting handle writes it; a key that does not read as one (written by
            // hand) becomes the bare key hash rather than stay readable.
            ScopedKey::opaque_readable(&row.idem_key, &hash)
                .unwrap_or_else(|| format!("sealed:{}", hex(&hash)))
        } else {
            row.idem_key.clone()
        };
        if dry_run || db.rewrite(&row, &key, &new).await? {
            done.resealed += 1;
            done.from_plaintext += u64::from(plaintext);
            return Ok(());
        }
        // The service wrote the record since it was read (a completion after an expiry, an
        // operator's expire): read it again. Gone, or no longer stored: nothing to seal.
        match db.stored_row(&hash).await? {
            Some(again) => row = again,
            None => return Ok(()),
        }
    }
    done.busy += 1;
    Ok(())
}

async fn run(m: ArgMatches) -> Result<(), Error> {
    let Some(url) = m.get_one::<String>("database-url") else {
        return Err("no database: pass --database-url or set DATABASE_URL".into());
    };
    let ring = key_ring(&m)?;
    let prefix = m
        .get_one::<String>("redis-prefix")
        .map_or("idem:", String::as_str);
    let db = Db::connect(url, prefix).await?;
    let json = m.get_flag("json");
    let out = &mut std::io::stdout().lock();
    match m.subcommand() {
        Some(("migrate", _)) => migrate(&db, out).await,
        Some(("purge", sub)) => purge(&db, sub, out).await,
        Some(("inspect", sub)) => inspect(&db, sub, ring.as_ref(), json, out).await,
        Some(("rekey", sub)) => rekey(&db, sub, ring.as_ref(), out).await,
        Some(("stats", _)) => stats(&db, json, out).await,
        Some(("release", sub)) => operate(&db, sub, Action::Release, out).await,
        Some(("expire", sub)) => operate(&db, sub, Action::Expire, out).await,
        _ => unreachable!("clap requires a subcommand"),
    }
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
            // One line, whatever line breaks a driver's message holds.
            let line = Chain(e.as_ref()).to_string().replace('\n', " ");
            eprintln!("error: {line}");
            ExitCode::FAILURE
        }
    }
}
