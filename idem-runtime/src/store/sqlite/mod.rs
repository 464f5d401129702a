//! [`SqliteStore`]: the embedded default store (one file, WAL, busy timeout).
//!
//! # Statements per path
//!
//! | path | statements |
//! |---|---|
//! | fresh claim, expired record replaced, expired lease taken over | 1: `INSERT .. ON CONFLICT (key_hash) DO UPDATE .. WHERE <claimable> RETURNING ..` |
//! | replay (completed), in progress | 2 in one call: the same `INSERT` (no row returned), then the `SELECT` of the row |
//! | complete, release, abandon, extend | 1 `UPDATE` / `DELETE` / `UPDATE` / `UPDATE .. RETURNING` |
//! | complete that matched no row (a retry after a lost acknowledgement, or fenced out) | +1 `SELECT` of the owner |
//! | get | 1 `SELECT` |
//! | purge_expired | 1 `DELETE .. WHERE key_hash IN (SELECT .. ORDER BY expire_at, key_hash LIMIT ?)` |
//!
//! Time is SQLite's: every statement computes "now" with `julianday('now')` (the clock of the
//! host the file lives on, the same for every process sharing it), takes the lease and TTL as
//! durations and returns the times it wrote. [`SqliteStore::with_clock`] overrides it for tests.
//!
//! SQLite has no data-modifying CTE, so the read cannot ride along with the claim in one statement:
//! a replay costs two. Both go in one call to the connection's thread (sqlx runs the statements of
//! one query string in turn), the `SELECT` conditioned on `changes() = 0`, so that it returns the
//! row only when the upsert changed nothing: one hop between threads instead of two, -60 to -90 µs
//! per replay (`BENCHMARKS.md`, "HTTP end to end"). Each statement is its own implicit transaction,
//! committed at once (S18).
//! Writers are serialized by SQLite's database lock; with WAL, readers never wait for them, and
//! the busy timeout (5 s by default) makes a writer wait for the lock instead of failing. A
//! writer still waiting after the timeout gets `SQLITE_BUSY`, reported as
//! [`StoreError::Unavailable`]. Several processes may share the file (WAL needs a local file
//! system, not NFS).
//!
//! # One writer connection
//!
//! SQLite runs one write transaction at a time. Writers that meet a held lock wait in the busy
//! handler, which sleeps 1, 2, 5, 10 ms and more between tries: with the writes of 4
//! concurrent requests spread over the pool, some slept while others kept taking the lock, and
//! p99 went to 5-12x p50. A store opened by [`SqliteStore::open`], [`connect_with`] or
//! [`connect_with_pool`] therefore sends its writes (claims, completions, releases, lease
//! extensions, purges) through **one connection of its own**, taken from a second pool of size 1
//! with the same options and kept between writes, where they queue in the order they come and
//! never meet the busy handler within the process. (Handed back to that pool between writes,
//! the connection went through sqlx's check of a returned connection, a round trip to its
//! thread that the next write waited for: kept, 1.12x / 1.23x the fresh requests per second at
//! 1 / 4 connections, BENCHMARKS.md. A write that failed or was given up on still hands it back,
//! and the check runs.) Reads (`get`, the owner of a record after a completion that matched
//! nothing) and the checkpoints use the main pool, whose connections WAL lets read beside the
//! writer (a replay's `SELECT` rides with its claim, below). Other processes sharing the
//! file, and a caller's own transaction on [`pool`](SqliteStore::pool) (the atomic mode), still
//! meet the store's writer through the busy handler. [`SqliteStore::from_pool`] and a pool of
//! one connection keep everything on the one pool. Closing [`pool`](SqliteStore::pool) closes
//! the writes too.
//!
//! # Checkpoints off the request path
//!
//! In WAL mode SQLite copies the log back into the database file (a checkpoint, which syncs
//! both files) inside the commit that grows the log past 1,000 pages: every few hundred writes
//! one request paid for it (two `fsync`s and the copy, 10-20 ms on the benchmark's disk), and
//! the requests queued behind it too. The store runs checkpoints itself, on a task of its own
//! (when a tokio runtime is running), after every 128 writes: a `PRAGMA
//! wal_checkpoint(PASSIVE)` on a reading connection copies the log while the writer goes on.
//! Under writes without a pause that never copies everything (frames keep arriving while it
//! runs), so the log never restarts by itself: once it holds 1,000 frames, a second checkpoint
//! on the writer's connection copies the few frames written since, with the writes held back
//! (1-5 ms on that disk, about once every 300 writes under full load), and the next write
//! restarts the log. SQLite's own threshold is raised to 2,000 pages on the writer's
//! connection and stays as a backstop. These background statements are not counted by
//! [`SqliteStore::statement_count`].
//!
//! An `INSERT` takes SQLite's write lock even when its upsert changes nothing, so a replay queues
//! with the writers, and its `SELECT` runs in the same call on the writer's connection. Reading
//! first would make replays read-only (WAL readers never wait) at the price of a third statement on
//! every fresh request; with one writer at a time either way, the store keeps the claim-first order
//! of the other backends.
//!
//! [`connect_with`]: SqliteStore::connect_with
//! [`connect_with_pool`]: SqliteStore::connect_with_pool

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
    ABANDON_SQL, CLAIM_AND_READ_SQL, CLAIMED_COLUMNS, COMPLETE_SQL, EXTEND_SQL, OWNER_SQL,
    PURGE_SQL, RELEASE_SQL, SELECT_SQL,
};
use super::clock::{Clock, Timestamp};
use super::error::StoreError;
use super::error::classify_sqlx;
use super::interface::{Claim, ClaimRequest, Completion, Lease, new_operation_id};
use super::sql_store::ops::{self, CLAIM_ATTEMPTS, contended};
use super::sql_store::{RawRecord, SqlBackend, SqlCore, impl_store, millis_param};
use crate::key::ScopedKey;

/// The statements of this store, for the benchmark's hand-written baseline. Not a public API.
#[doc(hidden)]
pub mod sql {
    /// The claim upsert: `?1` key hash, `?2` readable key, `?3` request hash, `?4` operation id,
    /// `?5` clock override (`NULL`), `?6` lease ms, `?7` TTL ms.
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
/// use idem_runtime::store::{SqliteStore, Store};
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
    /// 8 connections for reads and one connection for the store's writes (see "One writer
    /// connection" in the module docs). Run [`Store::migrate`](crate::store::Store::migrate) before the first claim. Give it a file:
    /// `:memory:` would give every pooled connection a database of its own (use
    /// [`MemoryStore`](super::memory::MemoryStore) instead).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Config`] when the file cannot be opened.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::connect_with(Self::options(path)).await
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
    /// alike: no writer connection of its own (see the module docs).
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

    /// Checkpoints the store has run in the background so far (and its clones; see the module
    /// docs); diagnostics.
    pub fn checkpoint_count(&self) -> u64 {
        self.checkpoints.done()
    }

    /// Completes `lease` on `conn`, typically `&mut *tx` of the caller's own
    /// `sqlx::Transaction`, so that the business writes and the snapshot commit together (or
    /// not at all). The same single `UPDATE` as [`Store::complete`](crate::store::Store::complete); nothing is committed until
    /// the caller commits. The caller's transaction holds SQLite's write lock: every other write
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
        let completed = ops::complete_in(&self.core, conn, lease, completion).await;
        self.written(completed)
    }
}

/// The completion `UPDATE` of `lease`, bound.
fn complete_query<'q>(
    lease: &'q Lease,
    fence: i64,
    completion: &'q Completion,
    headers: &'q [u8],
    now: Option<i64>,
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments> {
    sqlx::query(COMPLETE_SQL)
        .bind(&lease.key.hash()[..])
        .bind(fence)
        .bind(i64::from(
            super::interface::RecordState::from(completion.outcome).code(),
        ))
        .bind(i64::from(completion.status))
        .bind(headers)
        .bind(&completion.body[..])
        .bind(completion.biz_no.as_deref())
        .bind(completion.expire_at.map(Timestamp::as_millis))
        .bind(now)
        .bind(&lease.operation_id)
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
        let now = self.core.now_param();
        let done = self
            .core
            .send(|| async {
                let mut conn = self.core.write_conn().await?;
                let written = sqlx::query(PURGE_SQL)
                    .bind(now)
                    .bind(i64::from(batch))
                    .execute(&mut *conn)
                    .await;
                conn.settle(written)
            })
            .await?;
        let deleted = done.rows_affected();
        // A batch that deleted rows grows the WAL like any write: a store that only purges
        // (an idle service's sweeper) checkpoints in the background too.
        if deleted > 0 {
            self.wrote();
        }
        Ok(deleted)
    }

    async fn select<'e>(
        conn: &'e mut SqliteConnection,
        key: &'e ScopedKey,
        now: Option<i64>,
    ) -> Result<Option<RawRecord>, sqlx::Error> {
        let row = sqlx::query(SELECT_SQL)
            .bind(&key.hash()[..])
            .bind(now)
            .fetch_optional(conn)
            .await?;
        row.map(|r| read(&r)).transpose()
    }

    async fn complete<'e>(
        conn: &'e mut SqliteConnection,
        lease: &'e Lease,
        fence: i64,
        completion: &'e Completion,
        headers: &'e [u8],
        now: Option<i64>,
    ) -> Result<u64, sqlx::Error> {
        let done = complete_query(lease, fence, completion, headers, now)
            .execute(conn)
            .await?;
        Ok(done.rows_affected())
    }

    async fn owner<'e>(
        conn: &'e mut SqliteConnection,
        key: &'e ScopedKey,
    ) -> Result<Option<(i64, i64, String)>, sqlx::Error> {
        let row = sqlx::query(OWNER_SQL)
            .bind(&key.hash()[..])
            .fetch_optional(conn)
            .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .transpose()
    }

    async fn release<'e>(
        conn: &'e mut SqliteConnection,
        lease: &'e Lease,
        fence: i64,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(RELEASE_SQL)
            .bind(&lease.key.hash()[..])
            .bind(fence)
            .bind(&lease.operation_id)
            .execute(conn)
            .await?;
        Ok(done.rows_affected())
    }

    async fn abandon<'e>(
        conn: &'e mut SqliteConnection,
        lease: &'e Lease,
        fence: i64,
        now: Option<i64>,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(ABANDON_SQL)
            .bind(&lease.key.hash()[..])
            .bind(fence)
            .bind(&lease.operation_id)
            .bind(now)
            .execute(conn)
            .await?;
        Ok(done.rows_affected())
    }

    async fn extend<'e>(
        conn: &'e mut SqliteConnection,
        lease: &'e Lease,
        fence: i64,
        by_ms: i64,
        now: Option<i64>,
    ) -> Result<Option<(i64, i64)>, sqlx::Error> {
        let row = sqlx::query(EXTEND_SQL)
            .bind(&lease.key.hash()[..])
            .bind(fence)
            .bind(&lease.operation_id)
            .bind(by_ms)
            .bind(now)
            .fetch_optional(conn)
            .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    fn extended(
        out: Option<(i64, i64)>,
        lease: &Lease,
        _by: Duration,
    ) -> Result<Lease, StoreError> {
        ops::returned_lease(out, lease)
    }

    async fn migrate_on(conn: &mut SqliteConnection) -> Result<(), StoreError> {
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
