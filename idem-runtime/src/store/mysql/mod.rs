//! [`MySqlStore`]: the claim engine on MariaDB / MySQL (table `idem_idempotency_records`).
//!
//! # Statements per path
//!
//! | path | statements |
//! |---|---|
//! | fresh claim | 1 `INSERT` |
//! | replay (completed), in progress | 2: `INSERT` (error 1062) + `SELECT` |
//! | expired record replaced, expired lease taken over | 3: `INSERT` (1062) + `SELECT` + compare-and-swap `UPDATE .. WHERE rev = ?` |
//! | complete, release, abandon, extend | 1 `UPDATE` / `DELETE` / `UPDATE` / `UPDATE` |
//! | complete that matched no row (a retry after a lost acknowledgement, or fenced out) | +1 `SELECT` of the owner |
//! | get | 1 `SELECT` |
//! | purge_expired | 4: `BEGIN`, `SELECT .. ORDER BY expire_at LIMIT ? FOR UPDATE SKIP LOCKED`, `DELETE .. WHERE key_hash IN (..)`, `COMMIT` |
//!
//! So a fresh request costs 2 statements (claim, complete) and a replay 2; with
//! [`MySqlStore::with_one_round_trip_replays`] on MariaDB, a replay or an in-progress key costs
//! 1 and a takeover or a replaced record 2 (below). A statement rolled
//! back as a deadlock victim (1213) is sent again, up to 3 times, before
//! [`StoreError::Unavailable`] (the purge retries its whole transaction). A lock wait timeout
//! (1205) is not retried here: it already waited `innodb_lock_wait_timeout` (50 s by default),
//! and three more waits would hold the request for minutes; it is `Unavailable` at once (a claim
//! answers `503`, a completion is retried by the engine while its lease is held).
//!
//! # Time
//!
//! The database's clock decides: every statement computes "now" from `UTC_TIMESTAMP(6)` (UTC
//! milliseconds, whatever the session's time zone), takes the lease and TTL as durations, and
//! the writing statements hand their "now" back through `LAST_INSERT_ID(now)` in the OK packet,
//! from which the lease's times follow without another round trip. Rows read back carry that
//! "now". [`MySqlStore::with_clock`] overrides it for tests. Minimum versions: MariaDB 10.6,
//! MySQL 8.0.13 (`SKIP LOCKED`, and the expression default of migration `20261201000002`).
//!
//! # The table's order
//!
//! The primary key is InnoDB's clustered index, the table itself: `claim_id` (migration
//! `20261201000002`), which the server fills with `UUID_SHORT()` as the column's default: 8
//! bytes, unique on the server by construction and increasing, so a new record goes to the
//! table's right edge, whose pages are in the buffer pool, and the purge, which follows
//! `expire_at` (the creation time plus a TTL, mostly), empties its left edge. Clustered on the
//! SHA-256 `key_hash`, every claim went to a random page of the whole table, which stopped
//! fitting the buffer pool at about a million records (`BENCHMARKS.md`, "At scale"). The claim
//! index is the unique secondary index `uk_idem_key` on `key_hash`, whose entries carry the
//! primary key: 8 bytes of it, where the `(created_at, operation_id)` of migration
//! `20261201000001` put 45 and nearly doubled the index. Each claim's row has an id of its own,
//! so concurrent claims of one key collide only in `uk_idem_key`: on `(created_at, key_hash)`
//! they collided on the primary key as well, each loser queued on the row of another loser that
//! its duplicate in `uk_idem_key` then rolled back, and the queue deadlocked (about 5 % of the
//! claims of a 1,000-request single-key storm, "Contention"). Not an `AUTO_INCREMENT` column: an
//! `INSERT` that generates an id reports that id in the OK packet instead of the
//! `LAST_INSERT_ID(now)` above, and the fresh claim would get its lease's times wrong. An
//! expired record replaced by a new claim keeps its row and its place: it was read from that
//! page just before, and replacing keys is rare beside fresh ones.
//!
//! A fresh claim writes a random leaf of `uk_idem_key`, so claims stay as fast at 10 M records
//! as at 10 000 while the buffer pool holds the two secondary indexes, ~120 MB per million live
//! records (1.07-1.09x measured with a 2 GB pool; 1.5x with a 128 MB one, `BENCHMARKS.md`, "At
//! scale").
//!
//! No statement of this store names `claim_id` or the primary key: the default fills it, and the
//! purge walks `idx_idem_expire_at` by `expire_at` alone. So this build runs on the table of any
//! of the three migrations, and a build from before `20261201000002` runs on the new table,
//! whichever order a rolling deploy meets them in.
//!
//! # One round trip for a replay
//!
//! MariaDB 10.5+ takes `INSERT .. ON DUPLICATE KEY UPDATE rev = rev RETURNING <the record>`:
//! a fresh key inserts and returns its own row; a key that exists changes nothing (`rev =
//! rev`) and returns the row there, so the `SELECT` of a duplicate is saved. It is off by
//! default, [`MySqlStore::with_one_round_trip_replays`] turns it on: a fresh claim then reads
//! a row of 17 columns back instead of an OK packet, which cost it 5-10 % of its latency at
//! one connection (`BENCHMARKS.md`, "HTTP end to end"), while a replay took 30-35 % less; most
//! requests of most services are first attempts. The duplicate is locked exclusively for the
//! statement instead of shared, which a storm of 1,000 concurrent claims of one key took
//! without a deadlock (one statement per request, "Contention"): the primary key is the
//! claim's own id, so only `uk_idem_key` collides, and the decision is the same as
//! after a `SELECT` (`Record::decide`; a takeover or a replacement is the same compare-and-swap
//! on `rev`). MySQL answers the statement with a syntax error (1064): the first claim learns
//! it, and the store claims as without the option from then on. `ON DUPLICATE KEY UPDATE` acts
//! on a collision in *any* unique index: should the primary key ever collide (`UUID_SHORT()` is
//! unique per server, so only two servers of one `server_id` writing one table could), the row
//! returned is another key's; the claim checks that the row is its key's, and claims again
//! otherwise.
//!
//! # Why not `INSERT .. ON DUPLICATE KEY UPDATE` for the takeover
//!
//! MySQL has no `RETURNING`, so the claim is a plain `INSERT` and a duplicate is recognized by
//! error number 1062 **and** the name of the index that collided (S15): only a collision on the
//! claim index `uk_idem_key`, or on `PRIMARY`, means "the key exists"; a 1062 on any other
//! unique index is an error. `PRIMARY` is the claim index of a table not yet migrated past
//! `20261201000001`; after it, claims collide on `uk_idem_key` only (the primary key is the
//! claim's own id; were it ever to collide, the `SELECT` of the key finds no row, or the row
//! that is there, and either way the claim is decided right). The error message
//! text is never matched; the index name is the only part read from it, because MySQL reports
//! it nowhere else.
//!
//! `ON DUPLICATE KEY UPDATE` was rejected for two reasons. Its assignments are evaluated left
//! to right, each seeing the columns already assigned, so a conditional takeover
//! (`col = IF(<claimable>, new, col)` for a dozen columns whose own values decide
//! `<claimable>`) changes its own condition half-way. And sqlx connects with `CLIENT_FOUND_ROWS`,
//! under which "unchanged" reports 1 affected row, the same as "inserted": the 0 / 1 / 2 of S16
//! would be ambiguous.
//!
//! The takeover is instead a compare-and-swap on `rev`, a row version every write increments:
//! `UPDATE .. WHERE key_hash = ? AND rev = <rev read> AND <still claimable by the server's
//! clock>` (one statement to replace an expired record, another to take over an ended lease). Because `rev` always changes, an `UPDATE`
//! that matched its row always changed it, so "matched 0 rows" (fenced out) and "no change" can
//! never be confused, whether or not the connection reports found rows. Completion, release and
//! extension match on `fence` and bump `rev` likewise.

mod claim;
mod migrate;
mod statements;

use core::time::Duration;
use std::sync::Arc;

use sqlx::mysql::{
    MySql, MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlPoolOptions,
    MySqlQueryResult, MySqlRow,
};
use sqlx::{AssertSqlSafe, Row};

use self::claim::{Returning, statement_now};
pub use self::statements::NOW_MS_SQL;
use self::statements::{
    ABANDON_SQL, COMPLETE_SQL, EXTEND_SQL, OWNER_SQL, PURGE_DELETE_SQL, PURGE_SELECT_SQL,
    RELEASE_SQL, SELECT_SQL,
};
use super::clock::{Clock, Timestamp};
use super::error::StoreError;
use super::error::classify_sqlx;
use super::interface::{Claim, ClaimRequest, Completion, Lease, RecordState};
use super::sql_store::ops::{self, fenced_unless_one};
use super::sql_store::{RawRecord, SqlBackend, SqlCore, impl_store, ping_when_idle};
use crate::key::ScopedKey;

/// The statements of this store, for the benchmark's hand-written baseline. Not a public API.
#[doc(hidden)]
pub mod sql {
    /// The claim insert (see the binds in its documentation in the source).
    pub const INSERT: &str = super::statements::INSERT_SQL;
    /// The completion update.
    pub const COMPLETE: &str = super::statements::COMPLETE_SQL;
    /// The read of an existing record (clock override, key hash).
    pub fn select() -> &'static str {
        super::statements::SELECT_SQL
    }
}

/// A [`Store`](crate::store::Store) on MariaDB (10.6 or later, for `SKIP LOCKED`; tested on 10.11) or MySQL (8.0.13
/// or later, for the expression default of `claim_id`).
///
/// Every decision about time (is this lease over, has this record expired) is taken by the
/// database's clock, never the application's (see `docs/storage.md`, "Clocks").
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
/// use idem_runtime::store::{MySqlStore, Store};
/// let store = MySqlStore::connect("mysql://app:app@127.0.0.1/appdb").await?;
/// store.migrate().await?; // table `idem_idempotency_records`, history `idem_sqlx_migrations`
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MySqlStore {
    core: SqlCore<MySqlStore>,
    /// Whether claims use the one-statement form (`ON DUPLICATE KEY UPDATE .. RETURNING`,
    /// MariaDB 10.5+): off unless [`with_one_round_trip_replays`](Self::with_one_round_trip_replays),
    /// then learned from the first claim.
    returning: Arc<Returning>,
}

impl MySqlStore {
    /// The pool options [`connect`](Self::connect) and [`connect_with`](Self::connect_with) use:
    /// up to 10 connections; acquiring one gives up after 5 s ([`StoreError::Unavailable`]); a
    /// connection idle for 500 ms or more is checked (a `ping`) before it is used, one used more
    /// recently is not. sqlx's default checks every one, a round trip more per statement; a
    /// connection the server ends while it is busy fails its statement either way
    /// ([`StoreError::Unavailable`], and sqlx replaces it).
    pub fn pool_options() -> MySqlPoolOptions {
        ping_when_idle(
            MySqlPoolOptions::new()
                .max_connections(10)
                .acquire_timeout(Duration::from_secs(5)),
        )
    }

    /// Connects a pool with [`pool_options`](Self::pool_options) to `url`.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a malformed URL; [`StoreError::Unavailable`] when the server
    /// cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url.parse().map_err(classify)?).await
    }

    /// Connects a pool with [`pool_options`](Self::pool_options) and sqlx's connection options
    /// (TLS with the features `tls-rustls` / `tls-native-tls`, a socket, statement logging, ...).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_runtime::store::MySqlStore;
    /// use sqlx::mysql::MySqlConnectOptions;
    /// let options: MySqlConnectOptions = "mysql://app:app@db.internal/appdb?ssl-mode=verify_identity".parse()?;
    /// let store = MySqlStore::connect_with(options).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn connect_with(options: MySqlConnectOptions) -> Result<Self, StoreError> {
        Self::connect_with_pool(Self::pool_options(), options).await
    }

    /// Connects a pool configured by `pool_options` (size, timeouts, hooks) with `options`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn connect_with_pool(
        pool_options: MySqlPoolOptions,
        options: MySqlConnectOptions,
    ) -> Result<Self, StoreError> {
        let pool = pool_options.connect_with(options).await.map_err(classify)?;
        Ok(Self::from_pool(pool))
    }

    /// A store over an existing pool (the application's own, typically).
    pub fn from_pool(pool: MySqlPool) -> Self {
        Self {
            core: SqlCore::new(pool),
            returning: Arc::default(),
        }
    }

    /// Claims with one statement that returns the row it inserted or found (`INSERT .. ON
    /// DUPLICATE KEY UPDATE .. RETURNING`, MariaDB 10.5+), so that a replay, or a claim that
    /// finds its key in progress, costs one round trip instead of two. A fresh claim then
    /// reads a row back instead of an OK packet, which costs it more: choose by your share of
    /// retries (see "One round trip for a replay" in the module docs for the figures). On a
    /// server without it (MySQL), the first claim learns so and the store claims as without
    /// this.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
    /// use idem_runtime::store::MySqlStore;
    /// let store = MySqlStore::connect("mysql://app:app@127.0.0.1/appdb")
    ///     .await?
    ///     .with_one_round_trip_replays();
    /// # Ok(()) }
    /// ```
    pub fn with_one_round_trip_replays(mut self) -> Self {
        // Its own flag: the clones made before keep claiming as they did.
        self.returning = Arc::new(Returning::untried());
        self
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
    pub fn pool(&self) -> &MySqlPool {
        &self.core.pool
    }

    /// SQL statements sent so far by this store (and its clones); diagnostics.
    pub fn statement_count(&self) -> u64 {
        self.core.statements.get()
    }

    /// Completes `lease` on `conn`, typically `&mut *tx` of the caller's own
    /// `sqlx::Transaction`, so that the business writes and the snapshot commit together (or
    /// not at all). The same single `UPDATE` as [`Store::complete`](crate::store::Store::complete); it locks the record until
    /// the caller commits, so keep that transaction short (S18): meanwhile a duplicate claim of
    /// this key waits in its `INSERT` (InnoDB's duplicate check takes a shared lock on the row),
    /// up to `innodb_lock_wait_timeout`, after which it gets [`StoreError::Unavailable`]. A
    /// deadlock is not retried here (InnoDB rolled back the caller's transaction): it is
    /// [`StoreError::Unavailable`], and the caller retries its whole transaction.
    ///
    /// # Errors
    /// [`StoreError::FencedOut`] when the lease no longer owns the record: roll back.
    pub async fn complete_in(
        &self,
        conn: &mut MySqlConnection,
        lease: &Lease,
        completion: &Completion,
    ) -> Result<(), StoreError> {
        ops::complete_in(&self.core, conn, lease, completion).await
    }

    async fn purge_once(&self, batch: u32, now: Option<i64>) -> Result<u64, sqlx::Error> {
        let mut tx = crate::store::sql_store::begin(&self.core.pool).await?;
        let keys: Vec<Vec<u8>> = sqlx::query_scalar(PURGE_SELECT_SQL)
            .bind(now)
            .bind(i64::from(batch))
            .fetch_all(&mut *tx)
            .await?;
        let mut purged = 0;
        // At most 1000 keys per statement (MySQL allows 65 535 parameters).
        for chunk in keys.chunks(1000) {
            self.core.statements.add(1);
            let sql = format!("{PURGE_DELETE_SQL}{})", vec!["?"; chunk.len()].join(", "));
            // The rows are locked by this transaction since the `SELECT`, so they are still the
            // expired records it found, logically absent already (S21); the condition is
            // re-checked all the same. A key whose lock was skipped is not in the list.
            let mut delete = sqlx::query(AssertSqlSafe(sql)).bind(now).persistent(false);
            for key in chunk {
                delete = delete.bind(&key[..]);
            }
            purged += delete.execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        // BEGIN and COMMIT; `send` counted the `SELECT`.
        self.core.statements.add(2);
        Ok(purged)
    }
}

/// The completion `UPDATE` of `lease`, bound.
fn complete_query<'q>(
    lease: &'q Lease,
    fence: i64,
    completion: &'q Completion,
    headers: &'q [u8],
    now: Option<i64>,
) -> sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments> {
    sqlx::query(COMPLETE_SQL)
        .bind(RecordState::from(completion.outcome).code())
        .bind(completion.status as i16)
        .bind(headers)
        .bind(&completion.body[..])
        .bind(completion.biz_no.as_deref())
        .bind(completion.expire_at.map(Timestamp::as_millis))
        .bind(now)
        .bind(now)
        .bind(&lease.key.hash()[..])
        .bind(fence)
        .bind(&lease.operation_id)
}

/// The MySQL error number of `err`, when the server answered with one.
fn error_number(err: &sqlx::Error) -> Option<u16> {
    err.as_database_error()
        .and_then(|db| db.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}

/// Reads a row of `record_columns!(), now`.
fn read(row: &MySqlRow) -> Result<RawRecord, sqlx::Error> {
    // `state` is a `TINYINT`, `resp_status` a `SMALLINT`.
    RawRecord::read::<_, i8, i16>(row, 0)
}

/// Transient error numbers: lock wait timeout (1205), deadlock (1213), too many connections
/// (1040), shutdown in progress (1053), network errors (1152-1161), read-only server during a
/// failover (1290, 1836), connection killed (1927, MariaDB), disconnected by the server (4031).
fn classify(err: sqlx::Error) -> StoreError {
    classify_sqlx(
        err,
        |db| {
            db.try_downcast_ref::<MySqlDatabaseError>()
                .is_some_and(|e| {
                    matches!(
                        e.number(),
                        1205 | 1213 | 1040 | 1053 | 1152..=1161 | 1290 | 1836 | 1927 | 4031
                    )
                })
        },
        |db| {
            db.try_downcast_ref::<MySqlDatabaseError>()
                .is_some_and(|e| e.number() == 1146)
        },
    )
}

/// A statement (or the purge's transaction) rolled back as a deadlock victim (1213) had no effect
/// and is sent again (`sql_store::statements::send_retrying`). Not a lock wait timeout (1205): it already
/// waited its full timeout.
fn retryable(err: &sqlx::Error) -> bool {
    error_number(err) == Some(1213)
}

impl SqlBackend for MySqlStore {
    type Db = MySql;
    /// The `UPDATE`'s result: rows matched, and the statement's "now" in `last_insert_id`.
    type Extended = MySqlQueryResult;

    const NAME: &'static str = "mysql";

    fn core(&self) -> &SqlCore<Self> {
        &self.core
    }

    async fn claim_key(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        claim::claim(self, req).await
    }

    /// One batch in a short transaction: `SELECT .. FOR UPDATE SKIP LOCKED` locks up to `batch`
    /// expired records in index order, skipping any another transaction holds (a claim taking
    /// one over, another instance's purge), then one `DELETE` of exactly those. Sweepers on
    /// several instances therefore never wait for one another nor for claims, and take their
    /// locks in one order: no deadlock between them (one with a claim is retried whole).
    async fn purge_batch(&self, batch: u32) -> Result<u64, StoreError> {
        let now = self.core.now_param();
        self.core.send(|| self.purge_once(batch, now)).await
    }

    async fn select<'e>(
        conn: &'e mut MySqlConnection,
        key: &'e ScopedKey,
        now: Option<i64>,
    ) -> Result<Option<RawRecord>, sqlx::Error> {
        let row = sqlx::query(SELECT_SQL)
            .bind(now)
            .bind(&key.hash()[..])
            .fetch_optional(conn)
            .await?;
        row.map(|r| read(&r)).transpose()
    }

    async fn complete<'e>(
        conn: &'e mut MySqlConnection,
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
        conn: &'e mut MySqlConnection,
        key: &'e ScopedKey,
    ) -> Result<Option<(i64, i64, String)>, sqlx::Error> {
        let row = sqlx::query(OWNER_SQL)
            .bind(&key.hash()[..])
            .fetch_optional(conn)
            .await?;
        row.map(|r| {
            Ok((
                i64::from(r.try_get::<i8, _>(0)?),
                r.try_get(1)?,
                r.try_get(2)?,
            ))
        })
        .transpose()
    }

    async fn release<'e>(
        conn: &'e mut MySqlConnection,
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
        conn: &'e mut MySqlConnection,
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

    /// No `RETURNING`: the statement hands its "now" back through `LAST_INSERT_ID(now)`.
    async fn extend<'e>(
        conn: &'e mut MySqlConnection,
        lease: &'e Lease,
        fence: i64,
        by_ms: i64,
        now: Option<i64>,
    ) -> Result<MySqlQueryResult, sqlx::Error> {
        sqlx::query(EXTEND_SQL)
            .bind(now)
            .bind(by_ms)
            .bind(now)
            .bind(by_ms)
            .bind(now)
            .bind(&lease.key.hash()[..])
            .bind(fence)
            .bind(&lease.operation_id)
            .execute(conn)
            .await
    }

    fn extended(done: MySqlQueryResult, lease: &Lease, by: Duration) -> Result<Lease, StoreError> {
        fenced_unless_one(done.rows_affected(), lease)?;
        let lease_until = statement_now(&done)? + by;
        // Only the holder of this fence writes a processing record, and only this method
        // raises its expiry: with the latest copy of the lease (the engine's), the record's
        // expiry was `lease.expire_at`, stretched here to the new lease end.
        Ok(Lease {
            lease_until,
            expire_at: lease.expire_at.max(lease_until),
            ..lease.clone()
        })
    }

    async fn migrate_on(conn: &mut MySqlConnection) -> Result<(), StoreError> {
        migrate::migrate_on(conn).await
    }

    fn classify(err: sqlx::Error) -> StoreError {
        classify(err)
    }

    fn retryable(err: &sqlx::Error) -> bool {
        retryable(err)
    }
}

impl_store!(MySqlStore);
