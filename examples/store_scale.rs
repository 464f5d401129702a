//! The SQL stores at scale: claim and replay latency as stored records pile up, the table's and
//! its indexes' bytes per million records, and the purge of expired records under load.
//! `scripts/bench-scale` drives it against throwaway PostgreSQL and MariaDB servers and a SQLite
//! file (BENCHMARKS.md, "At scale"); point it at a database of your own the same way (it creates
//! and drops databases named `idem_scale_*`, or files `PATH-*.db` for SQLite).
//!
//! ```sh
//! cargo run --release --features postgres,mysql --example store_scale -- \
//!     --store postgres --url postgres://app:app@127.0.0.1:5432/appdb scale --sizes 10000,1000000
//! cargo run --release --features postgres,mysql --example store_scale -- \
//!     --store mysql --url mysql://app:app@127.0.0.1:3306/appdb purge --batches 1000,5000
//! ```
//!
//! Everything goes through the public [`Store`] API, as the engine calls it: a fresh request is
//! `claim` (acquired) then `complete` with a ~200-byte JSON body, two headers and a business
//! number; a replay is the `claim` of a completed key. Only the bulk load writes rows directly:
//! completed records in the stores' own format (the key hash of a real [`ScopedKey`], the header
//! blob, a 64-digit request hash, a UUID operation id, 24-hour expiry), generated in SQL
//! (`generate_series` on PostgreSQL, a recursive CTE on MariaDB) or, on SQLite, which has no
//! SHA-256 in SQL, inserted from here in large transactions. A claim of a loaded key must replay
//! it, which checks that the format matches.
//!
//! **`scale`**: one database per size, loaded first, then (on MariaDB) its two secondary indexes
//! read whole into the buffer pool, then measured in rounds that visit every size in turn (the
//! order rotated every round), so that drift on a shared machine hits all sizes alike; every figure
//! is compared with the smallest size's. One client, one operation at a time (latency, not
//! throughput). Paths: `fresh` (claim + complete of a new key), `replay-old` (a
//! random loaded record: cold pages at 10 M), `replay-recent` (a key completed a moment before,
//! like a client's retry). Prints latency, the bytes of the table and of each index, and (on
//! PostgreSQL) how many completions were HOT updates.
//!
//! **`purge`**: loads `--expired` expired records beside `--live` live ones, then runs `--tasks`
//! concurrent fresh requests while a [`Sweeper`] is switched on and off every `--window`; a
//! request counts for the phase it started and ended in (requests that meet the end of a
//! batch after the switch-off are dropped). Claim p50 / p99 with the sweeper against without it,
//! batches and records purged per second of sweeping, per batch size, each on a freshly loaded
//! backlog.
//!
//! | flag | default | |
//! |---|---|---|
//! | `--store S` | | `postgres`, `mysql` or `sqlite` |
//! | `--url URL` | | a server URL (its database is only used to create the others), or a file path prefix for SQLite |
//! | `--fillfactor N` | | PostgreSQL: `ALTER TABLE .. SET (fillfactor = N)` before loading |
//! | `scale --sizes A,B,..` | `10000,1000000` | stored records per database |
//! | `scale --rounds N --ops N` | `5`, `400` | rounds, and operations per path, size and round |
//! | `purge --expired N --live N` | `1000000`, `100000` | the backlog and the live records beside it |
//! | `purge --batches A,B,..` | `500,1000,5000,10000` | sweeper batch sizes, one trial each |
//! | `purge --tasks N --window D --max D` | `4`, `1s`, `300s` | concurrent requests, on/off period, a trial's limit |
//! | `--keep` | | keep the databases |

use std::error::Error;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::MySqlStore;
use idem::PostgresStore;
use idem::RequestHash;
use idem::SqliteStore;
use idem::key::ScopedKey;
use idem::store::{Claim, ClaimRequest, Completion, Outcome, Store, Sweeper};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, Executor, MySqlConnection, PgConnection};

type BoxError = Box<dyn Error + Send + Sync>;

const USAGE: &str = "usage: store_scale --store postgres|mysql|sqlite --url URL [--fillfactor N] \
[--keep] (scale [--sizes A,B,..] [--rounds N] [--ops N] | purge [--expired N] [--live N] \
[--batches A,B,..] [--tasks N] [--window D] [--max D])";

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(24 * 3600);
const TTL_MS: i64 = TTL.as_millis() as i64;
/// The scope and operation of every key (`tenant-1:POST /v1/payments:<32 hex digits>`).
const TENANT: &str = "tenant-1";
const OPERATION: &str = "POST /v1/payments";
/// `ScopedKey`'s hash domain (key/scoped.rs): the loaded rows' key hashes are computed in SQL
/// from it, and a replay of a loaded key checks that they match.
const KEY_HASH_DOMAIN: &[u8] = b"idem.scoped-key.v2\0";
/// Loaded records `i` are created `STEP_MS * i` after `now - 23 h`: increasing with `i` as in
/// production (the `expire_at` index grows at its right edge), all alive for the run (10 M
/// records span 22 h).
const STEP_MS: i64 = 8;
/// Expired records are numbered from here (their keys never meet live ones).
const EXPIRED_BASE: i64 = 1 << 40;
/// A typical created-payment response body (~200 bytes).
const BODY: &str = r#"{"id":"pay_3f9c2a7e41b84d0c9a1e","object":"payment","amount":"100.00","currency":"EUR","status":"succeeded","order_id":"ord_8d41c0b2e77f","customer":"cus_51a9e02f","created":"2026-12-01T12:00:00Z"}"#;

fn client_key(i: i64) -> String {
    format!("{i:032x}")
}

fn scoped(client_key: &str) -> ScopedKey {
    ScopedKey::new(&[TENANT], OPERATION, client_key).expect("a valid key")
}

/// The bytes hashed before the client key: domain, part count, and each scope part and the
/// operation length-prefixed (big-endian u64), as `ScopedKey::new` does.
fn key_prefix() -> Vec<u8> {
    let mut b = KEY_HASH_DOMAIN.to_vec();
    b.extend_from_slice(&1u64.to_be_bytes());
    for part in [TENANT, OPERATION] {
        b.extend_from_slice(&(part.len() as u64).to_be_bytes());
        b.extend_from_slice(part.as_bytes());
    }
    b
}

fn readable_prefix() -> String {
    format!("{TENANT}:{OPERATION}:")
}

fn headers(location: &str) -> Vec<(String, Vec<u8>)> {
    vec![
        ("content-type".to_owned(), b"application/json".to_vec()),
        ("location".to_owned(), location.as_bytes().to_vec()),
    ]
}

/// The stores' header blob (`1, count: u32, (name_len: u32, name, value_len: u32, value)*`).
fn header_blob(headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![1];
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (name, value) in headers {
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

fn request_hash() -> RequestHash {
    RequestHash::of_bytes(br#"{"amount":"100.00","currency":"EUR"}"#)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What the bulk loaders bind: the same values for every row.
struct RowFormat {
    key_prefix: Vec<u8>,
    readable_prefix: String,
    request_hash: String,
    headers: Vec<u8>,
    body: Vec<u8>,
}

impl RowFormat {
    fn new() -> Self {
        RowFormat {
            key_prefix: key_prefix(),
            readable_prefix: readable_prefix(),
            request_hash: request_hash().to_string(),
            headers: header_blob(&headers("/v1/payments/pay_3f9c2a7e41b84d0c9a1e")),
            body: BODY.as_bytes().to_vec(),
        }
    }
}

const COLUMNS: &str = "key_hash, idem_key, request_hash, state, operation_id, fence, rev, \
    resp_status, resp_headers, resp_body, biz_no, locked_at, lease_until, expire_at, created_at, \
    updated_at, completed_at";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Postgres,
    MySql,
    Sqlite,
}

/// One database (or SQLite file) and the store over it.
struct Db {
    kind: Kind,
    name: String,
    store: Arc<dyn Store>,
    pg: Option<PostgresStore>,
    my: Option<MySqlStore>,
    lite: Option<SqliteStore>,
}

/// Table and index bytes.
#[derive(Default, Clone)]
struct Bytes {
    rows: i64,
    table: i64,
    /// Per index: (name, bytes).
    indexes: Vec<(String, i64)>,
}

struct Server {
    kind: Kind,
    url: String,
    fillfactor: Option<u32>,
}

impl Server {
    async fn admin_pg(&self) -> Result<PgConnection, BoxError> {
        Ok(PgConnection::connect_with(&self.url.parse::<PgConnectOptions>()?).await?)
    }

    async fn admin_my(&self) -> Result<MySqlConnection, BoxError> {
        Ok(MySqlConnection::connect_with(&self.url.parse::<MySqlConnectOptions>()?).await?)
    }

    /// Creates (again) the database `name` and migrates it.
    async fn create(&self, name: &str) -> Result<Db, BoxError> {
        let name = format!("idem_scale_{name}");
        let (mut pg, mut my, mut lite) = (None, None, None);
        let store: Arc<dyn Store> = match self.kind {
            Kind::Postgres => {
                let mut admin = self.admin_pg().await?;
                admin
                    .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                    .await?;
                admin
                    .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await?;
                let opts = self.url.parse::<PgConnectOptions>()?.database(&name);
                let store = PostgresStore::connect_with(opts).await?;
                store.migrate().await?;
                if let Some(ff) = self.fillfactor {
                    sqlx::query(AssertSqlSafe(format!(
                        "ALTER TABLE idem.idempotency_records SET (fillfactor = {ff})"
                    )))
                    .execute(store.pool())
                    .await?;
                }
                pg = Some(store.clone());
                Arc::new(store)
            }
            Kind::MySql => {
                let mut admin = self.admin_my().await?;
                admin
                    .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                    .await?;
                admin
                    .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await?;
                let opts = self.url.parse::<MySqlConnectOptions>()?.database(&name);
                let store = MySqlStore::connect_with(opts).await?;
                store.migrate().await?;
                my = Some(store.clone());
                Arc::new(store)
            }
            Kind::Sqlite => {
                let path = format!("{}-{name}.db", self.url);
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{path}{suffix}"));
                }
                let store = SqliteStore::open(&path).await?;
                store.migrate().await?;
                lite = Some(store.clone());
                Arc::new(store)
            }
        };
        Ok(Db {
            kind: self.kind,
            name,
            store,
            pg,
            my,
            lite,
        })
    }

    async fn drop_db(&self, db: Db) -> Result<(), BoxError> {
        let Db {
            name,
            pg,
            my,
            lite,
            store,
            ..
        } = db;
        drop(store);
        if let Some(s) = pg {
            s.pool().close().await;
            let mut admin = self.admin_pg().await?;
            admin
                .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                .await?;
        }
        if let Some(s) = my {
            s.pool().close().await;
            let mut admin = self.admin_my().await?;
            admin
                .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                .await?;
        }
        if let Some(s) = lite {
            s.pool().close().await;
            let path = format!("{}-{name}.db", self.url);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
        }
        Ok(())
    }
}

impl Db {
    /// Loads completed records `from..to` (numbering of [`client_key`]); `created` is the
    /// creation time of record 0, each next one [`STEP_MS`] later, and they expire `ttl_ms`
    /// after their creation.
    async fn load(
        &self,
        f: &RowFormat,
        from: i64,
        to: i64,
        created: i64,
        ttl_ms: i64,
    ) -> Result<(), BoxError> {
        match self.kind {
            Kind::Postgres => {
                let pool = self.pg.as_ref().expect("postgres").pool();
                const CHUNK: i64 = 1_000_000;
                let sql = format!(
                    "INSERT INTO idem.idempotency_records ({COLUMNS}) \
                     SELECT sha256($1::bytea || int8send(octet_length(k)::bigint) || convert_to(k, 'UTF8')), \
                       $2 || k, $3, 1, md5(i::text)::uuid::text, 1, 2, 201, $4, $5, 'pay_' || i, \
                       c, c + 30000, c + $6, c, c + 40, c + 40 \
                     FROM (SELECT i, lpad(to_hex(i), 32, '0') AS k, $7::bigint + i * {STEP_MS} AS c \
                           FROM generate_series($8::bigint, $9::bigint) AS i) s"
                );
                let mut at = from;
                while at < to {
                    let end = (at + CHUNK).min(to);
                    sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(&f.key_prefix)
                        .bind(&f.readable_prefix)
                        .bind(&f.request_hash)
                        .bind(&f.headers)
                        .bind(&f.body)
                        .bind(ttl_ms)
                        .bind(created - from * STEP_MS)
                        .bind(at)
                        .bind(end - 1)
                        .execute(pool)
                        .await?;
                    at = end;
                }
            }
            Kind::MySql => {
                let pool = self.my.as_ref().expect("mysql").pool();
                // A recursive CTE of 0..999 (within MariaDB's default `max_recursive_iterations`
                // and MySQL's `cte_max_recursion_depth`), crossed with itself: 100 000 rows a
                // statement.
                const CHUNK: i64 = 100_000;
                let sql = format!(
                    "INSERT INTO idem_idempotency_records ({COLUMNS}) \
                     SELECT UNHEX(SHA2(CONCAT(?, UNHEX(LPAD(HEX(LENGTH(k)), 16, '0')), k), 256)), \
                       CONCAT(?, k), ?, 1, UUID(), 1, 2, 201, ?, ?, CONCAT('pay_', i), \
                       c, c + 30000, c + ?, c, c + 40, c + 40 \
                     FROM (SELECT i, LOWER(LPAD(HEX(i), 32, '0')) AS k, ? + i * {STEP_MS} AS c \
                           FROM (WITH RECURSIVE d(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < 999) \
                                 SELECT ? + a.n * 1000 + b.n AS i FROM d a, d b WHERE a.n < {}) s0 \
                           WHERE i < ?) s",
                    CHUNK / 1000
                );
                let mut at = from;
                while at < to {
                    let end = (at + CHUNK).min(to);
                    sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(&f.key_prefix)
                        .bind(&f.readable_prefix)
                        .bind(&f.request_hash)
                        .bind(&f.headers)
                        .bind(&f.body)
                        .bind(ttl_ms)
                        .bind(created - from * STEP_MS)
                        .bind(at)
                        .bind(end)
                        .execute(pool)
                        .await?;
                    at = end;
                }
            }
            Kind::Sqlite => {
                let pool = self.lite.as_ref().expect("sqlite").pool();
                let sql = format!(
                    "INSERT INTO idem_idempotency_records ({COLUMNS}) \
                     VALUES (?, ?, ?, 1, ?, 1, 2, 201, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                );
                const CHUNK: i64 = 50_000;
                let mut at = from;
                while at < to {
                    let end = (at + CHUNK).min(to);
                    let mut tx = pool.begin().await?;
                    for i in at..end {
                        let k = client_key(i);
                        let key = scoped(&k);
                        let c = created + (i - from) * STEP_MS;
                        sqlx::query(AssertSqlSafe(sql.clone()))
                            .bind(&key.hash()[..])
                            .bind(key.readable())
                            .bind(&f.request_hash)
                            .bind(format!("{:08x}-0000-4000-8000-{:012x}", i >> 48, i))
                            .bind(&f.headers)
                            .bind(&f.body)
                            .bind(format!("pay_{i}"))
                            .bind(c)
                            .bind(c + 30_000)
                            .bind(c + ttl_ms)
                            .bind(c)
                            .bind(c + 40)
                            .bind(c + 40)
                            .execute(&mut *tx)
                            .await?;
                    }
                    tx.commit().await?;
                    at = end;
                }
            }
        }
        Ok(())
    }

    /// Statistics and visibility map up to date, as autovacuum / InnoDB would leave them.
    async fn analyze(&self) -> Result<(), BoxError> {
        match self.kind {
            Kind::Postgres => {
                let pool = self.pg.as_ref().expect("postgres").pool();
                sqlx::query("VACUUM ANALYZE idem.idempotency_records")
                    .execute(pool)
                    .await?;
            }
            Kind::MySql => {
                let pool = self.my.as_ref().expect("mysql").pool();
                sqlx::query("ANALYZE TABLE idem_idempotency_records")
                    .fetch_all(pool)
                    .await?;
            }
            Kind::Sqlite => {
                let pool = self.lite.as_ref().expect("sqlite").pool();
                sqlx::query("ANALYZE").execute(pool).await?;
                sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .fetch_all(pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// MariaDB reads with `O_DIRECT`: a database loaded before another one finds its pages gone
    /// from the buffer pool, and would be measured cold. Reads both secondary indexes whole, as
    /// a server in service has them (when the pool holds them). PostgreSQL reads through the
    /// OS page cache, which the load filled; SQLite likewise.
    async fn warm(&self) -> Result<(), BoxError> {
        if let Some(store) = &self.my {
            for index in ["uk_idem_key", "idx_idem_expire_at"] {
                sqlx::query(AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM idem_idempotency_records FORCE INDEX ({index})"
                )))
                .fetch_one(store.pool())
                .await?;
            }
        }
        Ok(())
    }

    async fn bytes(&self) -> Result<Bytes, BoxError> {
        let mut b = Bytes::default();
        match self.kind {
            Kind::Postgres => {
                let pool = self.pg.as_ref().expect("postgres").pool();
                // `pg_table_size`: the heap with its TOAST table, free space and visibility maps.
                let (rows, table): (i64, i64) = sqlx::query_as(
                    "SELECT (SELECT count(*) FROM idem.idempotency_records), \
                            pg_table_size('idem.idempotency_records')",
                )
                .fetch_one(pool)
                .await?;
                (b.rows, b.table) = (rows, table);
                b.indexes = sqlx::query_as(
                    "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) \
                     FROM pg_index WHERE indrelid = 'idem.idempotency_records'::regclass \
                     ORDER BY 1",
                )
                .fetch_all(pool)
                .await?;
            }
            Kind::MySql => {
                let pool = self.my.as_ref().expect("mysql").pool();
                b.rows = sqlx::query_scalar("SELECT COUNT(*) FROM idem_idempotency_records")
                    .fetch_one(pool)
                    .await?;
                // Pages in use per index, from the persistent statistics `ANALYZE TABLE` just
                // wrote (information_schema.TABLES has the same figures, less broken down); the
                // primary key is the clustered index, that is the table.
                let pages: Vec<(String, i64)> = sqlx::query_as(
                    "SELECT index_name, CAST(stat_value AS SIGNED) FROM mysql.innodb_index_stats \
                     WHERE database_name = DATABASE() AND table_name = 'idem_idempotency_records' \
                       AND stat_name = 'size' ORDER BY index_name",
                )
                .fetch_all(pool)
                .await?;
                let page: i64 = sqlx::query_scalar("SELECT CAST(@@innodb_page_size AS SIGNED)")
                    .fetch_one(pool)
                    .await?;
                for (name, n) in pages {
                    if name == "PRIMARY" {
                        b.table = n * page;
                    } else {
                        b.indexes.push((name, n * page));
                    }
                }
            }
            Kind::Sqlite => {
                let pool = self.lite.as_ref().expect("sqlite").pool();
                b.rows = sqlx::query_scalar("SELECT COUNT(*) FROM idem_idempotency_records")
                    .fetch_one(pool)
                    .await?;
                let objects: Result<Vec<(String, i64)>, _> = sqlx::query_as(
                    "SELECT name, SUM(pgsize) FROM dbstat WHERE name LIKE '%idem_%' GROUP BY name \
                     ORDER BY name",
                )
                .fetch_all(pool)
                .await;
                match objects {
                    Ok(objects) => {
                        for (name, n) in objects {
                            if name == "idem_idempotency_records" {
                                b.table = n;
                            } else if !name.contains("sqlx") {
                                b.indexes.push((name, n));
                            }
                        }
                    }
                    Err(_) => {
                        // No dbstat: the whole file.
                        let (n, size): (i64, i64) = sqlx::query_as(
                            "SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()",
                        )
                        .fetch_one(pool)
                        .await?;
                        b.table = n * size;
                    }
                }
            }
        }
        Ok(b)
    }
}

/// PostgreSQL's counts of updates and HOT updates of the table (after the store's pool is
/// closed, so that its backends have reported them).
async fn hot_updates(server: &Server, name: &str) -> Result<(i64, i64), BoxError> {
    let opts = server.url.parse::<PgConnectOptions>()?.database(name);
    let mut conn = PgConnection::connect_with(&opts).await?;
    for _ in 0..50 {
        let (upd, hot): (i64, i64) = sqlx::query_as(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables \
             WHERE relid = 'idem.idempotency_records'::regclass",
        )
        .fetch_one(&mut conn)
        .await?;
        if upd > 0 {
            return Ok((upd, hot));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((0, 0))
}

/// Latencies in µs.
#[derive(Default, Clone)]
struct Lat(Vec<u32>);

impl Lat {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_micros().min(u128::from(u32::MAX)) as u32);
    }
    fn extend(&mut self, other: &Lat) {
        self.0.extend_from_slice(&other.0);
    }
    fn pct(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        f64::from(v[((v.len() - 1) as f64 * p).round() as usize])
    }
}

fn completion(n: u64) -> Completion {
    Completion::new(Outcome::Completed, 201, BODY.as_bytes().to_vec())
        .with_headers(headers(&format!("/v1/payments/pay_{n:x}")))
        .with_biz_no(format!("pay_{n:x}"))
}

/// A fresh request: claim (acquired) and complete. Returns the claim's and the whole latency.
async fn fresh(
    store: &dyn Store,
    key: &ScopedKey,
    n: u64,
) -> Result<(Duration, Duration), BoxError> {
    let req = ClaimRequest::new(key, request_hash(), LEASE, TTL);
    let t0 = Instant::now();
    let lease = match store.claim(&req).await? {
        Claim::Acquired(lease) => lease,
        other => return Err(format!("fresh key {key}: {other:?}").into()),
    };
    let t1 = Instant::now();
    store.complete(&lease, &completion(n)).await?;
    Ok((t1 - t0, t0.elapsed()))
}

/// A replay: the claim of a completed key.
async fn replay(store: &dyn Store, key: &ScopedKey) -> Result<Duration, BoxError> {
    let req = ClaimRequest::new(key, request_hash(), LEASE, TTL);
    let t0 = Instant::now();
    match store.claim(&req).await? {
        Claim::Completed(record) if record.request_hash == req.request_hash => Ok(t0.elapsed()),
        other => Err(format!(
            "key {key} was expected completed (is the bulk-loaded row format the stores' own?): {other:?}"
        )
        .into()),
    }
}

/// A small xorshift generator: which loaded records the replays read.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

const PATHS: [&str; 4] = ["fresh", "fresh-claim", "replay-old", "replay-recent"];

async fn scale(
    server: &Server,
    sizes: &[i64],
    rounds: usize,
    ops: usize,
    keep: bool,
) -> Result<(), BoxError> {
    let f = RowFormat::new();
    let run = now_ms() as u64;
    let mut dbs = Vec::new();
    let mut bytes = Vec::new();
    let mut load_rate = Vec::new();
    for &size in sizes {
        let db = server.create(&size.to_string()).await?;
        let t = Instant::now();
        db.load(&f, 0, size, now_ms() - 23 * 3600 * 1000, TTL_MS)
            .await?;
        let loaded = t.elapsed();
        db.analyze().await?;
        let b = db.bytes().await?;
        eprintln!(
            "{}: {size} records loaded in {:.1} s ({:.0}/s), analyzed in {:.1} s",
            db.name,
            loaded.as_secs_f64(),
            size as f64 / loaded.as_secs_f64(),
            t.elapsed().as_secs_f64() - loaded.as_secs_f64()
        );
        // The format check: a loaded record replays.
        replay(&*db.store, &scoped(&client_key(size - 1))).await?;
        bytes.push(b);
        load_rate.push(size as f64 / loaded.as_secs_f64());
        dbs.push(db);
    }

    // lat[round][size][path]
    let mut lat = vec![vec![vec![Lat::default(); PATHS.len()]; sizes.len()]; rounds];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ run);
    let mut n = 0u64;
    // Warm-up: the indexes read (MariaDB), connections opened, statements prepared, the small
    // tables' pages read once.
    for db in &dbs {
        db.warm().await?;
    }
    for db in &dbs {
        for _ in 0..50 {
            n += 1;
            fresh(&*db.store, &scoped(&format!("f{run:015x}{n:016x}")), n).await?;
        }
    }
    for (r, at) in lat.iter_mut().enumerate() {
        for j in 0..sizes.len() {
            let s = (j + r) % sizes.len();
            let db = &dbs[s];
            let mut recent = Vec::with_capacity(ops);
            for _ in 0..ops {
                n += 1;
                let key = scoped(&format!("f{run:015x}{n:016x}"));
                let (claim, total) = fresh(&*db.store, &key, n).await?;
                at[s][0].push(total);
                at[s][1].push(claim);
                recent.push(key);
            }
            for _ in 0..ops {
                let i = rng.below(sizes[s] as u64) as i64;
                at[s][2].push(replay(&*db.store, &scoped(&client_key(i))).await?);
            }
            for key in &recent {
                at[s][3].push(replay(&*db.store, key).await?);
            }
        }
        eprintln!("round {}/{rounds} done", r + 1);
    }

    let mut hot = Vec::new();
    let mut done = Vec::new();
    for db in dbs {
        if db.kind == Kind::Postgres {
            db.pg.as_ref().expect("postgres").pool().close().await;
            hot.push(Some(hot_updates(server, &db.name).await?));
        } else {
            hot.push(None);
        }
        done.push(db);
    }

    println!(
        "| records | path | p50 µs | p99 µs | p50 ×{} | p99 ×{} |",
        human(sizes[0]),
        human(sizes[0])
    );
    println!("|---:|---|---:|---:|---:|---:|");
    for (p, path) in PATHS.iter().enumerate() {
        for s in 0..sizes.len() {
            let all = pooled(lat.iter().map(|at| &at[s][p]));
            let base = pooled(lat.iter().map(|at| &at[0][p]));
            // The p50 ratio: median over rounds of the round's own ratio.
            let p50_ratio = median(
                lat.iter()
                    .map(|at| at[s][p].pct(0.5) / at[0][p].pct(0.5))
                    .collect(),
            );
            println!(
                "| {} | {path} | {:.0} | {:.0} | {:.2} | {:.2} |",
                human(sizes[s]),
                all.pct(0.5),
                all.pct(0.99),
                p50_ratio,
                all.pct(0.99) / base.pct(0.99)
            );
        }
    }
    println!();
    let names: Vec<String> = bytes[0].indexes.iter().map(|(n, _)| n.clone()).collect();
    print!("| records | table MB |");
    for n in &names {
        print!(" {n} MB |");
    }
    println!(
        " table B/record | indexes B/record | total MB per million | load records/s | HOT updates |"
    );
    print!("|---:|---:|");
    for _ in &names {
        print!("---:|");
    }
    println!("---:|---:|---:|---:|---:|");
    for (s, b) in bytes.iter().enumerate() {
        let rows = b.rows.max(1) as f64;
        let idx: i64 = b.indexes.iter().map(|(_, n)| n).sum();
        print!("| {} | {:.1} |", human(sizes[s]), mb(b.table));
        for (_, n) in &b.indexes {
            print!(" {:.1} |", mb(*n));
        }
        let hot = match hot[s] {
            Some((upd, h)) if upd > 0 => {
                format!("{h} / {upd} ({:.0} %)", 100.0 * h as f64 / upd as f64)
            }
            _ => "-".to_owned(),
        };
        println!(
            " {:.0} | {:.0} | {:.0} | {:.0} | {hot} |",
            b.table as f64 / rows,
            idx as f64 / rows,
            mb(b.table + idx) * 1e6 / rows,
            load_rate[s]
        );
    }
    if !keep {
        for db in done {
            drop_or_warn(server, db).await;
        }
    }
    Ok(())
}

/// Drops `db`; a failure only warns (the tables are printed, the server is throwaway).
async fn drop_or_warn(server: &Server, db: Db) {
    let name = db.name.clone();
    if let Err(e) = server.drop_db(db).await {
        eprintln!("warning: could not drop {name}: {e}");
    }
}

fn pooled<'a>(rounds: impl Iterator<Item = &'a Lat>) -> Lat {
    let mut all = Lat::default();
    for l in rounds {
        all.extend(l);
    }
    all
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn mb(b: i64) -> f64 {
    b as f64 / 1_048_576.0
}

fn human(n: i64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{} M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{} k", n / 1_000),
        n => n.to_string(),
    }
}

const OFF: u8 = 0;
const ON: u8 = 1;
/// Switched off, waiting for the batch in flight to end: requests are not counted.
const DRAIN: u8 = 2;

struct PurgeArgs {
    expired: i64,
    live: i64,
    batches: Vec<u32>,
    tasks: usize,
    window: Duration,
    max: Duration,
}

async fn purge(server: &Server, a: &PurgeArgs, keep: bool) -> Result<(), BoxError> {
    let f = RowFormat::new();
    let db = server.create("purge").await?;
    db.load(&f, 0, a.live, now_ms() - 23 * 3600 * 1000, TTL_MS)
        .await?;
    let run = now_ms() as u64;
    let counter = Arc::new(AtomicU64::new(0));
    let mut next_expired = EXPIRED_BASE;
    let mut lines = Vec::new();
    for &batch in &a.batches {
        // A fresh backlog, oldest expiry first, the last one expired an hour ago.
        let t = Instant::now();
        let created = now_ms() - TTL_MS - 3600 * 1000 - a.expired * STEP_MS;
        db.load(&f, next_expired, next_expired + a.expired, created, TTL_MS)
            .await?;
        next_expired += a.expired;
        db.analyze().await?;
        eprintln!(
            "batch {batch}: {} expired records loaded and analyzed in {:.1} s",
            a.expired,
            t.elapsed().as_secs_f64()
        );
        let phase = Arc::new(AtomicU8::new(OFF));
        let busy = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..a.tasks {
            let (store, phase, stop, counter) = (
                db.store.clone(),
                phase.clone(),
                stop.clone(),
                counter.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let (mut off, mut on) = (Lat::default(), Lat::default());
                while !stop.load(Ordering::Relaxed) {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let key = scoped(&format!("f{run:015x}{n:016x}"));
                    let before = phase.load(Ordering::Acquire);
                    let (_, d) = fresh(&*store, &key, n).await?;
                    if phase.load(Ordering::Acquire) == before {
                        match before {
                            OFF => off.push(d),
                            ON => on.push(d),
                            _ => {}
                        }
                    }
                }
                Ok::<_, BoxError>((off, on))
            }));
        }
        let sweeper = Sweeper::new(db.store.clone())
            .batch(batch)
            .max_batches_per_tick(1);
        let sweeping = {
            let (phase, busy, stop) = (phase.clone(), busy.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut batches, mut rows) = (0u64, 0u64);
                let mut each = Lat::default();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if phase.load(Ordering::Acquire) != ON {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                    busy.store(true, Ordering::Release);
                    let t = Instant::now();
                    let n = sweeper.sweep_once().await;
                    busy.store(false, Ordering::Release);
                    let n = n?;
                    each.push(t.elapsed());
                    batches += 1;
                    rows += n;
                    if n < u64::from(batch) {
                        break;
                    }
                }
                Ok::<_, BoxError>((batches, rows, each))
            })
        };
        // Warm-up, then alternate off / on windows until the backlog is gone.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        let mut on_time = Duration::ZERO;
        while !sweeping.is_finished() && started.elapsed() < a.max {
            phase.store(OFF, Ordering::Release);
            tokio::time::sleep(a.window).await;
            let t = Instant::now();
            phase.store(ON, Ordering::Release);
            tokio::time::sleep(a.window).await;
            phase.store(DRAIN, Ordering::Release);
            while busy.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            on_time += t.elapsed();
        }
        // The last off window, so that both phases end the trial alike.
        phase.store(OFF, Ordering::Release);
        tokio::time::sleep(a.window).await;
        stop.store(true, Ordering::Relaxed);
        let (batches, rows, each) = sweeping.await??;
        let (mut off, mut on) = (Lat::default(), Lat::default());
        for t in tasks {
            let (o, n) = t.await??;
            off.extend(&o);
            on.extend(&n);
        }
        let secs = on_time.as_secs_f64();
        eprintln!(
            "batch {batch}: {rows} purged in {batches} batches, {secs:.1} s sweeping, {:.1} s in all",
            started.elapsed().as_secs_f64()
        );
        lines.push(format!(
            "| {batch} | {rows} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {} / {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} |",
            secs,
            batches as f64 / secs,
            rows as f64 / secs,
            each.pct(0.5) / 1000.0,
            each.pct(0.99) / 1000.0,
            off.0.len(),
            on.0.len(),
            off.pct(0.5),
            on.pct(0.5),
            on.pct(0.5) / off.pct(0.5),
            off.pct(0.99),
            on.pct(0.99),
            on.pct(0.99) / off.pct(0.99),
        ));
    }
    println!(
        "| batch | purged | sweeping s | batches/s | records/s | batch p50 ms | batch p99 ms \
         | requests off / on | p50 off µs | p50 on µs | p50 ×off | p99 off µs | p99 on µs | p99 ×off |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for l in lines {
        println!("{l}");
    }
    if !keep {
        drop_or_warn(server, db).await;
    }
    Ok(())
}

fn parse_list<T: FromStr>(s: &str) -> Result<Vec<T>, BoxError> {
    s.split(',')
        .map(|x| {
            x.trim()
                .replace('_', "")
                .parse()
                .map_err(|_| format!("not a number: {x}").into())
        })
        .collect()
}

fn parse_duration(s: &str) -> Result<Duration, BoxError> {
    let (n, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = n.parse().map_err(|_| format!("not a duration: {s}"))?;
    Ok(Duration::from_secs_f64(match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("not a duration: {s}").into()),
    }))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut it = std::env::args().skip(1);
    let (mut kind, mut url, mut fillfactor, mut keep, mut mode) = (None, None, None, false, None);
    let mut sizes = vec![10_000, 1_000_000];
    let (mut rounds, mut ops) = (5, 400);
    let mut pa = PurgeArgs {
        expired: 1_000_000,
        live: 100_000,
        batches: vec![500, 1000, 5000, 10_000],
        tasks: 4,
        window: Duration::from_secs(1),
        max: Duration::from_secs(300),
    };
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--store" => {
                kind = Some(match value()?.as_str() {
                    "postgres" => Kind::Postgres,
                    "mysql" => Kind::MySql,
                    "sqlite" => Kind::Sqlite,
                    s => return Err(format!("--store {s}: postgres, mysql or sqlite").into()),
                })
            }
            "--url" => url = Some(value()?),
            "--fillfactor" => fillfactor = Some(value()?.parse()?),
            "--keep" => keep = true,
            "scale" | "purge" => mode = Some(arg.clone()),
            "--sizes" => sizes = parse_list(&value()?)?,
            "--rounds" => rounds = value()?.parse()?,
            "--ops" => ops = value()?.parse()?,
            "--expired" => pa.expired = parse_list(&value()?)?[0],
            "--live" => pa.live = parse_list(&value()?)?[0],
            "--batches" => pa.batches = parse_list(&value()?)?,
            "--tasks" => pa.tasks = value()?.parse()?,
            "--window" => pa.window = parse_duration(&value()?)?,
            "--max" => pa.max = parse_duration(&value()?)?,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ => return Err(format!("unknown argument {arg}\n{USAGE}").into()),
        }
    }
    let (Some(kind), Some(url), Some(mode)) = (kind, url, mode) else {
        return Err(USAGE.into());
    };
    let server = Server {
        kind,
        url,
        fillfactor,
    };
    if mode == "scale" {
        sizes.sort_unstable();
        scale(&server, &sizes, rounds.max(1), ops.max(1), keep).await
    } else {
        purge(&server, &pa, keep).await
    }
}
