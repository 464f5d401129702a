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

use core::convert::identity;
use core::ops::ControlFlow;
use core::time::Duration;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Executor, Row, Sqlite};

use super::clock::{Clock, SystemClock, Timestamp};
use super::error::StoreError;
use super::error::classify_sqlx;
use super::interface::{Claim, ClaimRequest, Completion, Lease, new_operation_id};
use super::migrate::{Applied, history, migrate_error, pending};
use super::sql_store::ops::{self, CLAIM_ATTEMPTS, contended};
use super::sql_store::{RawRecord, SqlBackend, SqlCore, impl_store, millis_param, record_columns};
use crate::key::ScopedKey;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// "Now" in milliseconds since the Unix epoch by SQLite's clock (the operating system's, read
/// by the library: with one file on one host, every process sees the same clock). SQLite keeps
/// `'now'` fixed for one `sqlite3_step()`, and every statement here does its work in its first
/// step, so the value is the same wherever a statement reads it; `julianday` counts whole
/// milliseconds, rounded back exactly. Parameter `?n` is the store's clock override, `NULL`
/// unless `with_clock` set one (tests).
macro_rules! now {
    ($n:literal) => {
        concat!("COALESCE(?", $n, ", ", db_now!(), ")")
    };
}

macro_rules! db_now {
    () => {
        "CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"
    };
}

/// The SQL expression the store reads the time from: milliseconds since the Unix epoch by
/// SQLite's clock, for tools that query the table beside the store.
pub const NOW_MS_SQL: &str = db_now!();

/// The text of [`CLAIM_SQL`], which [`CLAIM_AND_READ_SQL`] begins with too.
macro_rules! claim_upsert {
    () => {
        concat!(
            "INSERT INTO idem_idempotency_records \
               (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at) \
             VALUES (?1, ?2, ?3, 0, ?4, 1, 1, ",
            now!("5"),
            ", ",
            now!("5"),
            " + ?6, ",
            now!("5"),
            " + max(?6, ?7), ",
            now!("5"),
            ", ",
            now!("5"),
            ") \
             ON CONFLICT (key_hash) DO UPDATE SET \
               idem_key = excluded.idem_key, \
               request_hash = excluded.request_hash, \
               state = 0, \
               operation_id = CASE WHEN expire_at <= ",
            now!("5"),
            " THEN excluded.operation_id ELSE operation_id END, \
               fence = fence + 1, \
               rev = rev + 1, \
               resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
               locked_at = ",
            now!("5"),
            ", \
               lease_until = ",
            now!("5"),
            " + ?6, \
               expire_at = CASE WHEN expire_at <= ",
            now!("5"),
            " THEN ",
            now!("5"),
            " + max(?6, ?7) \
                 ELSE max(expire_at, ",
            now!("5"),
            " + ?6) END, \
               created_at = CASE WHEN expire_at <= ",
            now!("5"),
            " THEN ",
            now!("5"),
            " ELSE created_at END, \
               updated_at = ",
            now!("5"),
            " \
             WHERE expire_at <= ",
            now!("5"),
            " \
                OR (state = 0 AND lease_until <= ",
            now!("5"),
            " AND request_hash = excluded.request_hash) \
             RETURNING fence, operation_id, lease_until, expire_at"
        )
    };
}

/// The claim (S13, S14): one atomic upsert that inserts a fresh record, or replaces an expired
/// one (S21), or takes over an expired lease of the same request (S23), and returns the row only
/// when it claimed. `?5` is the clock override, `?6` the lease and `?7` the TTL in ms.
/// Unqualified columns in `DO UPDATE` are the existing row's. The operation id changes only for
/// a record expired by the database's clock (logically absent, S21: a new operation, whose
/// predecessor's zombie stays fenced out); an ended lease of the same request keeps it (S23).
const CLAIM_SQL: &str = claim_upsert!();

/// [`CLAIM_SQL`], then, in the same call to the connection's thread, the row of the key when
/// the upsert changed nothing (`changes() = 0`: a completed record to replay, or one in
/// progress): a replay costs one call instead of two. The upsert's row has 4 columns, the
/// read's those of [`SELECT_SQL`]: the caller tells them apart by their number
/// ([`CLAIMED_COLUMNS`]).
const CLAIM_AND_READ_SQL: &str = concat!(
    claim_upsert!(),
    "; SELECT ",
    record_columns!(),
    ", ",
    now!("5"),
    " FROM idem_idempotency_records WHERE key_hash = ?1 AND changes() = 0"
);

/// Completion (S18): one short statement, only while the lease's fence and operation id are the
/// record's and it is processing (S23). No expiry condition: a result nobody superseded is
/// stored even when it comes after `expire_at`. `?8` is an absolute expiry for the snapshot (or
/// `NULL`), `?9` the clock override.
const COMPLETE_SQL: &str = concat!(
    "UPDATE idem_idempotency_records SET \
       state = ?3, resp_status = ?4, resp_headers = ?5, resp_body = ?6, biz_no = ?7, \
       expire_at = COALESCE(?8, expire_at), updated_at = ",
    now!("9"),
    ", completed_at = ",
    now!("9"),
    ", \
       rev = rev + 1 \
     WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?10"
);

/// Who owns a record: read when a completion matched no row (see `completed_earlier`).
const OWNER_SQL: &str =
    "SELECT state, fence, operation_id FROM idem_idempotency_records WHERE key_hash = ?1";

const RELEASE_SQL: &str = "DELETE FROM idem_idempotency_records \
    WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?3";

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`).
const ABANDON_SQL: &str = concat!(
    "UPDATE idem_idempotency_records SET \
       lease_until = min(lease_until, ",
    now!("4"),
    "), updated_at = ",
    now!("4"),
    ", rev = rev + 1 \
     WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?3"
);

/// Renews a lease for `?4` ms from now; the record lives at least as long.
const EXTEND_SQL: &str = concat!(
    "UPDATE idem_idempotency_records SET \
       lease_until = ",
    now!("5"),
    " + ?4, \
       expire_at = max(expire_at, ",
    now!("5"),
    " + ?4), \
       updated_at = ",
    now!("5"),
    ", rev = rev + 1 \
     WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?3 \
     RETURNING lease_until, expire_at"
);

/// Purge along `idx_idem_expire_at`, bounded by `LIMIT`, in `(expire_at, key_hash)` order
/// (S21). One statement under SQLite's write lock: the records it deletes are exactly the ones
/// its subquery found expired by the database's clock (logically absent already).
const PURGE_SQL: &str = concat!(
    "DELETE FROM idem_idempotency_records WHERE key_hash IN \
       (SELECT key_hash FROM idem_idempotency_records WHERE expire_at <= ",
    now!("1"),
    " \
        ORDER BY expire_at, key_hash LIMIT ?2)"
);

/// The row of a key and the database's "now" (`?2`: the clock override).
const SELECT_SQL: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", ",
    now!("2"),
    " FROM idem_idempotency_records WHERE key_hash = ?1"
);

/// The statements of this store, for the benchmark's hand-written baseline. Not a public API.
#[doc(hidden)]
pub mod sql {
    /// The claim upsert: `?1` key hash, `?2` readable key, `?3` request hash, `?4` operation id,
    /// `?5` clock override (`NULL`), `?6` lease ms, `?7` TTL ms.
    pub const CLAIM: &str = super::CLAIM_SQL;
    /// The completion update.
    pub const COMPLETE: &str = super::COMPLETE_SQL;
    /// The read of an existing record (`?1` key hash, `?2` clock override).
    pub fn select() -> &'static str {
        super::SELECT_SQL
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

/// Writes between two checkpoints run by the store (see "Checkpoints off the request path"):
/// a claim or a completion writes about 3 pages (the row, its index entries), so the log grows
/// by ~350 frames between two checkpoints, and one of them sees it pass [`HOLD_WRITES_FROM`]
/// well before [`WRITER_AUTOCHECKPOINT`].
const CHECKPOINT_EVERY: u64 = 128;

/// The log size, in frames, from which the checkpoint holds the writes back to finish (see
/// [`checkpoint`]): about once every 300 writes under full load (a pause per request is
/// rarer than 1 %), and far enough below [`WRITER_AUTOCHECKPOINT`] for the ~350 frames of a
/// checkpoint interval and the writes that land during the first step.
const HOLD_WRITES_FROM: i64 = 1_000;

/// SQLite's automatic checkpoint threshold on the writer connection, in pages (SQLite's
/// default is 1,000): only a backstop, which the store's own checkpoints keep from running.
const WRITER_AUTOCHECKPOINT: &str = "2000";

/// The store's own checkpoints, shared by its clones.
#[derive(Debug, Default)]
struct Checkpoints {
    /// Writes that changed the database.
    writes: AtomicU64,
    /// A checkpoint task is running: no second one.
    running: AtomicBool,
    /// Checkpoints run so far (diagnostics).
    done: AtomicU64,
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
        let writer = (pool_options.get_max_connections() > 1).then(|| {
            pool_options
                .clone()
                .max_connections(1)
                .min_connections(0)
                .connect_lazy_with(
                    options
                        .clone()
                        .pragma("wal_autocheckpoint", WRITER_AUTOCHECKPOINT),
                )
        });
        let pool = open_pool(pool_options, options).await?;
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
        self.checkpoints.done.load(Ordering::Relaxed)
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

/// The checkpoint of "Checkpoints off the request path": a passive one on a reading
/// connection, which copies the log while the writer goes on; then, once the log has grown to
/// [`HOLD_WRITES_FROM`] frames, a second one on the writer's connection, which copies the
/// frames written meanwhile with the writes held back, so that the next write restarts the
/// log. A log written to without a pause is never fully copied by the first step alone (frames
/// keep arriving while it runs): it would grow until SQLite's automatic checkpoint ran inside
/// a request's commit.
async fn checkpoint(core: &SqlCore<SqliteStore>) -> Result<(), sqlx::Error> {
    const CHECKPOINT: &str = "PRAGMA wal_checkpoint(PASSIVE)";
    // (busy, frames in the log, frames copied); -1, -1 when the file is not in WAL mode.
    let (_, log, _): (i64, i64, i64) = sqlx::query_as(CHECKPOINT).fetch_one(&core.pool).await?;
    if log >= HOLD_WRITES_FROM {
        let mut conn = core.write_conn().await?;
        let written = sqlx::query(CHECKPOINT).execute(&mut *conn).await;
        conn.settle(written)?;
    }
    Ok(())
}

/// The columns of the row [`CLAIM_SQL`] returns when it claimed.
const CLAIMED_COLUMNS: usize = 4;

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

/// Applies the pending migrations on `conn`, its own connection.
///
/// A schema already up to date — every restart of an instance — is recognized from the history
/// alone, which a reader sees without waiting for any writer (WAL). Only pending migrations take
/// the write lock, `BEGIN IMMEDIATE`, so that two processes migrating together run one after the
/// other, and read the history again under it. Taking the lock first made an instance restarted
/// while others served traffic (on SQLite every claim is a write) queue behind their writers
/// until the busy timeout and fail with "database is locked": it did not start.
async fn migrate_on(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    if up_to_date(conn).await? {
        return Ok(());
    }
    (&mut *conn)
        .execute(sqlx::raw_sql("BEGIN IMMEDIATE"))
        .await
        .map_err(|e| migrate_error("cannot lock the database for migrations", e))?;
    (&mut *conn)
        .execute(sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS idem_sqlx_migrations (\
           version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
           installed_on INTEGER NOT NULL, success BOOLEAN NOT NULL, \
           checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
        ))
        .await
        .map_err(|e| migrate_error("cannot create idem_sqlx_migrations", e))?;
    let applied = read_history(conn).await?;
    for m in pending(&MIGRATOR, &applied, &[])? {
        let started = std::time::Instant::now();
        (&mut *conn)
            .execute(sqlx::raw_sql(m.sql.clone()))
            .await
            .map_err(|e| migrate_error(&format!("migration {} failed", m.version), e))?;
        sqlx::query(
            "INSERT INTO idem_sqlx_migrations \
             (version, description, installed_on, success, checksum, execution_time) \
             VALUES (?1, ?2, ?3, TRUE, ?4, ?5)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(SystemClock.now().as_millis())
        .bind(&*m.checksum)
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
    }
    (&mut *conn)
        .execute(sqlx::raw_sql("COMMIT"))
        .await
        .map_err(|e| migrate_error("cannot commit the migrations", e))?;
    Ok(())
}

/// `true` when idem's history exists and lists every migration of this build, read without a
/// lock. A history that records a failed or edited migration is the same error as under the
/// lock.
async fn up_to_date(conn: &mut SqliteConnection) -> Result<bool, StoreError> {
    let history: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idem_sqlx_migrations'",
    )
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| migrate_error("cannot read the schema", e))?;
    if history.is_none() {
        return Ok(false);
    }
    let applied = read_history(conn).await?;
    Ok(pending(&MIGRATOR, &applied, &[])?.is_empty())
}

/// idem's migration history.
async fn read_history(conn: &mut SqliteConnection) -> Result<Vec<Applied>, StoreError> {
    history(
        sqlx::query_as("SELECT version, checksum, success FROM idem_sqlx_migrations")
            .fetch_all(conn)
            .await,
        "idem_sqlx_migrations",
    )
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

/// Connects `pool_options`' pool, its first connection opened again while SQLite answers
/// `SQLITE_BUSY`, until the pool's acquire timeout. Several processes starting together on a
/// new file: the first to open it turns it to WAL (`journal_mode`, set on every connection), a
/// change that takes an exclusive lock without waiting in the busy handler, so another process
/// opening the file at that moment met "database is locked" at once and did not start. Once the
/// file is in WAL mode, opening it takes no such lock.
async fn open_pool(
    pool_options: SqlitePoolOptions,
    options: SqliteConnectOptions,
) -> Result<SqlitePool, StoreError> {
    let deadline = std::time::Instant::now() + pool_options.get_acquire_timeout();
    loop {
        match pool_options.clone().connect_with(options.clone()).await {
            Err(sqlx::Error::Database(db))
                if locked(&*db) && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            pool => return pool.map_err(classify),
        }
    }
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

    /// Counts a write that changed the database, and every [`CHECKPOINT_EVERY`] writes starts
    /// the [`checkpoint`] on a task of its own, unless one is running or there is no tokio
    /// runtime (SQLite's automatic checkpoint then does it, as without this). A failed
    /// checkpoint is left to the next one, or to the automatic one: it loses nothing.
    fn wrote(&self) {
        let checkpoints = &self.checkpoints;
        let writes = checkpoints.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if !writes.is_multiple_of(CHECKPOINT_EVERY)
            || checkpoints.running.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            checkpoints.running.store(false, Ordering::Release);
            return;
        };
        let (core, checkpoints) = (self.core.clone(), Arc::clone(checkpoints));
        runtime.spawn(async move {
            if let Err(e) = checkpoint(&core).await {
                tracing::debug!(target: "idem", error = %e, "background WAL checkpoint failed");
            } else {
                checkpoints.done.fetch_add(1, Ordering::Relaxed);
            }
            checkpoints.running.store(false, Ordering::Release);
        });
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
        migrate_on(conn).await
    }

    fn classify(err: sqlx::Error) -> StoreError {
        classify(err)
    }

    fn retryable(err: &sqlx::Error) -> bool {
        retryable(err)
    }
}

impl_store!(SqliteStore);
