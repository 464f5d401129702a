//! [`SqliteStore`]: the embedded store (one file, WAL, busy timeout).
//!
//! `statements` holds the SQL, `pools` opens the reading pool and the writer connection's pool,
//! `checkpoint` runs the WAL checkpoints off the request path, `migrate` applies the schema.
//!
//! The rule: every write of the store goes through its writer connection
//! (`SqlCore::write_conn`), where writes queue in order; a write sent on the reading pool
//! would meet the writer in SQLite's busy handler. Every statement computes "now" from
//! SQLite's clock (`julianday('now')`).
//!
//! The SQL, the statements of every path, the writer connection and the checkpoints:
//! `docs/storage.md`, "SQLite".

mod checkpoint;
mod migrate;
mod pools;
mod statements;

use core::convert::identity;
use core::ops::ControlFlow;
use core::time::Duration;
use std::path::Path;
use std::sync::Arc;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, Sqlite};

use self::checkpoint::Checkpoints;
pub use self::statements::NOW_MS_SQL;
use self::statements::{
    ABANDON_SQL, CLAIM_AND_READ_SQL, CLAIMED_COLUMNS, COMPLETE_EXPIRING_SQL, COMPLETE_SQL,
    EXTEND_SQL, OWNER_SQL, PURGE_RESPONSES_SQL, PURGE_SQL, RELEASE_SQL, SELECT_SQL,
};
use super::clock::{Clock, Timestamp};
use super::error::StoreError;
use super::error::classify_sqlx;
use super::interface::{Claim, ClaimRequest, Completion, Lease, new_operation_id};
use super::sql_store::ops::{self, CLAIM_ATTEMPTS, contended};
use super::sql_store::{
    RawRecord, SqlBackend, SqlCore, impl_store, lease_statements, millis_param, numbered_statements,
};

/// The statements of this store that other code sends by hand.
///
/// The claim path's are for the benchmark's hand-written baseline, not a public API. The
/// operator statements are what the `idem` CLI sends, usable by other tools that query the table
/// beside the store: reading a record ([`INSPECT`](sql::INSPECT)), counting records, ending a
/// lease ([`END_LEASE`](sql::END_LEASE)), expiring a record ([`EXPIRE`](sql::EXPIRE)), rewriting
/// a stored response ([`REWRITE_RESPONSE`](sql::REWRITE_RESPONSE)), reading the migration
/// history; they name the tables through [`TABLE`](sql::TABLE) and
/// [`MIGRATIONS_TABLE`](sql::MIGRATIONS_TABLE), and read the time from
/// [`NOW_MS_SQL`].
#[doc(hidden)]
pub mod sql {
    pub use super::statements::{
        COUNT_BY_STATE, COUNT_EXPIRED, COUNT_REMEMBERED, COUNT_STORED, END_LEASE, EXPIRE, EXPIRING,
        INSPECT, MIGRATIONS, MIGRATIONS_TABLE, OLDEST_PROCESSING, REWRITE_RESPONSE, SIZE,
        STORED_ONE, STORED_PAGE, TABLE,
    };

    /// The claim upsert: `?1` key hash, `?2` readable key, `?3` request hash, `?4` operation id,
    /// `?5` clock override (`NULL`), `?6` lease ms, `?7` TTL ms, `?8` remember ms (0: none).
    pub const CLAIM: &str = super::statements::CLAIM_SQL;
    /// The completion update.
    pub const COMPLETE: &str = super::statements::COMPLETE_SQL;
    /// The read of an existing record (`?1` key hash, `?2` clock override).
    pub fn select() -> &'static str {
        super::statements::SELECT_SQL
    }
}

/// A [`Store`](crate::store::Store) in an SQLite database file.
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
/// use idem_runtime::store::sqlite::SqliteStore;
/// use idem_runtime::store::Store;
/// let store = SqliteStore::open("idem.db").await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    core: SqlCore<SqliteStore>,
    checkpoints: Arc<Checkpoints>,
}

impl SqliteStore {
    /// One batch of a purge phase (`sql`: its statement, binding the clock override and the
    /// batch) on the writer; returns the rows it changed. A batch that changed rows grows the
    /// WAL like any write: a store that only purges (an idle service's sweeper) checkpoints in
    /// the background too.
    async fn purge_with(&self, sql: &'static str, batch: u32) -> Result<u64, StoreError> {
        let now = self.core.now_param();
        let done = self
            .core
            .send(|| async {
                let mut conn = self.core.write_conn().await?;
                let written = sqlx::query(sql)
                    .bind(now)
                    .bind(i64::from(batch))
                    .execute(&mut *conn)
                    .await;
                conn.settle(written)
            })
            .await?;
        let changed = done.rows_affected();
        if changed > 0 {
            self.wrote();
        }
        Ok(changed)
    }

    /// The recommended connection options for `path`: create the file if missing, WAL journal,
    /// `synchronous = NORMAL` (durable across process crashes; the last commits may be lost on
    /// power loss), 5 s busy timeout.
    pub fn options(path: impl AsRef<Path>) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
    }

    /// Opens (or creates) the database at `path` with [`SqliteStore::options`], a pool of up to
    /// 8 connections for reads and one connection for the store's writes (`docs/storage.md`,
    /// "SQLite"). Run [`Store::migrate`](crate::store::Store::migrate) before the first claim. Give
    /// it a file: `:memory:` would give every pooled connection a database of its own (use
    /// [`MemoryStore`](super::memory::MemoryStore) instead).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Config`] when the file cannot be opened.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::connect_with(Self::options(path)).await
    }

    /// Opens the database a SQLite URL names, in the forms sqlx's
    /// `SqliteConnectOptions::from_str` reads: `sqlite://path`, `sqlite:path`, a bare path,
    /// with sqlx's query parameters (`?mode=rwc`, `mode=ro`, `cache=..`). The store's settings of
    /// [`SqliteStore::options`] apply on top; the file is created if missing unless the URL names
    /// a `mode`. An in-memory database (`sqlite::memory:`, `mode=memory`) is refused: it would end
    /// with the connection that opened it ([`MemoryStore`](super::memory::MemoryStore) keeps
    /// records in memory).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
    /// use idem_runtime::store::sqlite::SqliteStore;
    /// let store = SqliteStore::connect("sqlite://data/idem.db?mode=rwc").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Config`] for a URL sqlx does not read (an unknown parameter, say); as
    /// [`SqliteStore::open`] otherwise.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let parsed: SqliteConnectOptions = url.parse().map_err(classify)?;
        let (database, params) = split_url(url);
        let names_mode = params.is_some_and(|p| p.split('&').any(|kv| kv.starts_with("mode=")));
        // The URL's `mode` as sqlx reads it; without one, the file is created as `open` does.
        let parsed = if names_mode {
            parsed
        } else {
            parsed.create_if_missing(true)
        };
        let options = parsed
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5));
        let in_memory = database == ":memory:"
            || params.is_some_and(|p| p.split('&').any(|kv| kv == "mode=memory"));
        if in_memory {
            return Err(StoreError::Config {
                message: "an in-memory SQLite database ends with the connection that opened it, \
                          and the store's connections come and go: give a file \
                          (`sqlite://path?mode=rwc`), or use `MemoryStore` for records in memory"
                    .to_owned(),
                source: None,
            });
        }
        Self::connect_with(options).await
    }

    /// The pool options [`open`](Self::open) and [`connect_with`](Self::connect_with) use: up to
    /// 8 connections; acquiring one gives up after 10 s; no check before a connection is used
    /// (sqlx's default `test_before_acquire` sends a `ping` to the connection's thread before
    /// every statement, and nothing ends a connection to a file from outside). The store's writer
    /// connection is a pool of its own with the same options and one connection.
    pub fn pool_options() -> SqlitePoolOptions {
        SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
    }

    /// Opens a pool with [`pool_options`](Self::pool_options) and `options`.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn connect_with(options: SqliteConnectOptions) -> Result<Self, StoreError> {
        Self::connect_with_pool(Self::pool_options(), options).await
    }

    /// Opens a pool configured by `pool_options` (size, timeouts, hooks) with `options`, and the
    /// store's writer connection with the same (unless `pool_options` allows one connection:
    /// everything then goes through it).
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub async fn connect_with_pool(
        pool_options: SqlitePoolOptions,
        options: SqliteConnectOptions,
    ) -> Result<Self, StoreError> {
        let writer = pools::writer(&pool_options, &options);
        let pool = pools::open(pool_options, options).await?;
        Ok(match writer {
            Some(writer) => Self::with_core(SqlCore::with_writer(pool, writer)),
            None => Self::from_pool(pool),
        })
    }

    /// A store over an existing pool (set WAL and a busy timeout on it), for reads and writes
    /// alike: no writer connection of its own (`docs/storage.md`, "SQLite").
    pub fn from_pool(pool: SqlitePool) -> Self {
        Self::with_core(SqlCore::new(pool))
    }

    fn with_core(core: SqlCore<Self>) -> Self {
        Self {
            core,
            checkpoints: Arc::default(),
        }
    }

    /// Decides by `clock` instead of the database server's clock: **for tests** (a
    /// [`ManualClock`](crate::store::clock::ManualClock) moves time without sleeping). Every
    /// statement then passes `clock`'s time where it would read the server's. In production
    /// leave it unset: with it, several application instances would need synchronized
    /// clocks, and a lease would have to exceed the handler's run time plus their skew.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.core.clock = Some(clock);
        self
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.core.pool
    }

    /// SQL statements sent so far by this store (and its clones); diagnostics.
    pub fn statement_count(&self) -> u64 {
        self.core.statements.get()
    }

    /// Checkpoints the store has run in the background so far (and its clones;
    /// `docs/storage.md`, "SQLite"); diagnostics.
    pub fn checkpoint_count(&self) -> u64 {
        self.checkpoints.done()
    }

    /// Completes `lease` on `conn`, typically `&mut *tx` of the caller's own
    /// `sqlx::Transaction`, so that the business writes and the snapshot commit together (or
    /// not at all). The same single `UPDATE` as [`Store::complete`](crate::store::Store::complete);
    /// nothing is committed until the caller commits. The caller's transaction holds SQLite's write
    /// lock: every other write
    /// (claims of any key) waits for it, so keep it short (S18).
    ///
    /// # Errors
    /// [`StoreError::FencedOut`] when the lease no longer owns the record: roll the transaction
    /// back.
    pub async fn complete_in(
        &self,
        conn: &mut SqliteConnection,
        lease: &Lease,
        completion: &Completion,
    ) -> Result<(), StoreError> {
        let completed = ops::complete_in(self, conn, lease, completion).await;
        self.written(completed)
    }
}

/// A SQLite URL's database and its query parameters, as `SqliteConnectOptions::from_str` splits
/// them.
fn split_url(url: &str) -> (&str, Option<&str>) {
    let rest = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    match rest.split_once('?') {
        Some((database, params)) => (database, Some(params)),
        None => (rest, None),
    }
}

/// Reads a row of `record_columns!(), now`.
fn read(row: &SqliteRow) -> Result<RawRecord, sqlx::Error> {
    RawRecord::read::<_, i64, i64>(row, 0)
}

/// SQLITE_BUSY (5) and SQLITE_LOCKED (6) with their extended codes are transient.
fn classify(err: sqlx::Error) -> StoreError {
    classify_sqlx(err, locked, |db| db.message().starts_with("no such table"))
}

/// SQLITE_BUSY (5) or SQLITE_LOCKED (6), with their extended codes.
fn locked(db: &dyn sqlx::error::DatabaseError) -> bool {
    db.code()
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| matches!(c & 0xff, 5 | 6))
}

/// SQLite has no deadlocks to retry: writers queue for the database lock in the busy handler
/// (the busy timeout), and a writer still waiting after it gets `SQLITE_BUSY`, which
/// `classify` reports as [`StoreError::Unavailable`] without a further wait here.
fn retryable(_: &sqlx::Error) -> bool {
    false
}

impl SqlBackend for SqliteStore {
    type Db = Sqlite;
    /// `RETURNING lease_until, expire_at`.
    type Extended = Option<(i64, i64)>;

    const NAME: &'static str = "sqlite";

    fn core(&self) -> &SqlCore<Self> {
        &self.core
    }

    fn wrote(&self) {
        self.checkpoints.wrote(&self.core);
    }

    async fn claim_key(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        req.validate()?;
        let operation_id = new_operation_id()?;
        let hash = req.request_hash.to_string();
        let (lease_ms, ttl_ms) = (millis_param(req.lease), millis_param(req.ttl));
        let remember_ms = req.remember_param();
        for _ in 0..CLAIM_ATTEMPTS {
            let now = self.core.now_param();
            let rows = self
                .core
                .send(|| async {
                    let mut conn = self.core.write_conn().await?;
                    let written = sqlx::query(CLAIM_AND_READ_SQL)
                        .bind(&req.key.hash()[..])
                        .bind(req.key.readable())
                        .bind(&hash)
                        .bind(&operation_id)
                        .bind(now)
                        .bind(lease_ms)
                        .bind(ttl_ms)
                        .bind(remember_ms)
                        .fetch_all(&mut *conn)
                        .await;
                    conn.settle(written)
                })
                .await?;
            let Some(row) = rows.first() else {
                continue; // purged or released in between: claim again
            };
            if row.len() == CLAIMED_COLUMNS {
                self.wrote();
                let fence: i64 = row.try_get(0).map_err(classify)?;
                let op: String = row.try_get(1).map_err(classify)?;
                let lease_until: i64 = row.try_get(2).map_err(classify)?;
                let expire_at: i64 = row.try_get(3).map_err(classify)?;
                return Ok(Claim::Acquired(Lease {
                    key: req.key.clone(),
                    request_hash: req.request_hash,
                    fence: u64::try_from(fence).unwrap_or(0),
                    took_over: op != operation_id,
                    operation_id: op,
                    lease_until: Timestamp::from_millis(lease_until),
                    expire_at: Timestamp::from_millis(expire_at),
                }));
            }
            // Not claimable when the upsert ran: the read rode along. Counted as the statement
            // it is, as when it was sent on its own.
            self.core.statements.add(1);
            let stored = read(row).map_err(classify)?.into_stored()?;
            if let ControlFlow::Break(answer) = stored
                .record
                .decide(&req.request_hash, stored.now)
                .settle(stored.record, identity)
            {
                return Ok(answer);
            }
            // It expired in between: claim again.
        }
        Err(contended(req.key))
    }

    async fn purge_batch(&self, batch: u32) -> Result<u64, StoreError> {
        self.purge_with(PURGE_SQL, batch).await
    }

    async fn purge_responses_batch(&self, batch: u32) -> Result<u64, StoreError> {
        self.purge_with(PURGE_RESPONSES_SQL, batch).await
    }

    numbered_statements! {
        conn: SqliteConnection,
        int: i64,
        read: read,
        select: SELECT_SQL,
        complete: COMPLETE_SQL,
        complete_expiring: COMPLETE_EXPIRING_SQL,
        extend: EXTEND_SQL,
    }

    lease_statements! {
        conn: SqliteConnection,
        state: i64,
        owner: |_| OWNER_SQL,
        release: |_| RELEASE_SQL,
        abandon: |_| ABANDON_SQL,
    }

    async fn migrate_on(conn: &mut SqliteConnection, _causal: bool) -> Result<(), StoreError> {
        migrate::migrate_on(conn).await
    }

    fn classify(err: sqlx::Error) -> StoreError {
        classify(err)
    }

    fn retryable(err: &sqlx::Error) -> bool {
        retryable(err)
    }
}

impl_store!(SqliteStore);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// sqlx's URL forms name the file they name: `?mode=rwc` is a parameter, not part of the name.
    #[tokio::test]
    async fn a_url_opens_the_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        for (url, file) in [
            (format!("sqlite://{}?mode=rwc", path("a.db")), "a.db"),
            (format!("sqlite:{}", path("b.db")), "b.db"),
            (format!("sqlite://{}", path("c.db")), "c.db"),
            (path("d.db"), "d.db"),
        ] {
            let store = SqliteStore::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            assert!(dir.path().join(file).exists(), "{url}");
        }
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!names.iter().any(|n| n.contains('?')), "{names:?}");
        // `mode=rw` names a mode: the missing file is not created.
        let absent = format!("sqlite://{}?mode=rw", path("absent.db"));
        assert!(SqliteStore::connect(&absent).await.is_err());
        assert!(!dir.path().join("absent.db").exists());
        let unknown = format!("sqlite://{}?color=blue", path("e.db"));
        assert!(matches!(
            SqliteStore::connect(&unknown).await,
            Err(StoreError::Config { .. })
        ));
    }

    /// `sqlite::memory:` is refused with what to use instead, not opened as a file named so.
    #[tokio::test]
    async fn an_in_memory_url_says_to_give_a_file() {
        for url in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://x.db?mode=memory",
        ] {
            match SqliteStore::connect(url).await {
                Err(StoreError::Config { message, .. }) => {
                    assert!(message.contains("give a file"), "{message}")
                }
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
