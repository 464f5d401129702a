//! [`MySqlStore`]: the claim engine on MariaDB / MySQL (table `idem_idempotency_records`).
//!
//! `statements` holds the SQL, `claim` the two claim strategies and the compare-and-swap
//! takeover, `migrate` the schema.
//!
//! The rule: no statement names `claim_id` or the primary key, so this build runs on the table
//! of every migration; a duplicate is error 1062 on the claim index, never the message text.
//! MySQL binds positionally: every `?` of the clock override is bound again. Minimum versions:
//! MariaDB 10.6, MySQL 8.0.13.
//!
//! The SQL, the statements of every path and the table's order: `docs/storage.md`,
//! "MariaDB / MySQL (S15, S16)" and "The record".

mod claim;
mod migrate;
mod statements;

use core::time::Duration;
use std::sync::Arc;

use sqlx::AssertSqlSafe;
use sqlx::mysql::{
    MySql, MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlPoolOptions,
    MySqlQueryResult, MySqlRow,
};

use self::claim::{Returning, statement_now};
pub use self::statements::NOW_MS_SQL;
use self::statements::{
    ABANDON_SQL, BindNow, EXTEND_SQL, OWNER_SQL, PURGE_DELETE_SQL, PURGE_RESPONSES_SQL,
    PURGE_SELECT_SQL, RELEASE_SQL, WSREP_ON_SQL, request_path, statement,
};
use super::clock::Clock;
use super::error::StoreError;
use super::error::classify_sqlx;
use super::interface::{Claim, ClaimRequest, Completion, Lease, RecordState};
use super::sql_store::ops::{self, fenced_unless_one};
use super::sql_store::{
    RawRecord, SqlBackend, SqlCore, connect_pool, impl_store, lease_statements, ping_when_idle,
};
use crate::key::ScopedKey;

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

    /// The claim insert as a store without a clock override sends it (see the binds in its
    /// documentation in the source, without the overrides).
    pub fn insert() -> &'static str {
        super::statements::request_path(false, None).insert
    }
    /// The completion update, as a store without a clock override sends it.
    pub fn complete() -> &'static str {
        super::statements::request_path(false, None).complete
    }
    /// The read of an existing record (key hash), as a store without a clock override sends it.
    pub fn select() -> &'static str {
        super::statements::request_path(false, None).select
    }
    /// The same read on a node of a Galera cluster (`MySqlStore::with_galera`): causal.
    pub fn select_causal() -> &'static str {
        super::statements::request_path(true, None).select
    }
    /// The completion update on a node of a Galera cluster: causal.
    pub fn complete_causal() -> &'static str {
        super::statements::request_path(true, None).complete
    }
}

/// A [`Store`](crate::store::Store) on MariaDB (10.6 or later, for `SKIP LOCKED`; tested on 10.11)
/// or MySQL (8.0.13 or later, for the expression default of `claim_id`).
///
/// Every decision about time (is this lease over, has this record expired) is taken by the
/// database's clock, never the application's (see `docs/storage.md`, "Clocks").
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
/// use idem_runtime::store::mysql::MySqlStore;
/// use idem_runtime::store::Store;
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
    /// use idem_runtime::store::mysql::MySqlStore;
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

    /// Connects a pool configured by `pool_options` (size, timeouts, hooks) with `options`. A
    /// first connection is opened before the pool's, so that a refused one fails at once with
    /// its cause ([`ConnectCause`](crate::store::ConnectCause)) rather than after the acquire
    /// timeout as a bare pool timeout.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn connect_with_pool(
        pool_options: MySqlPoolOptions,
        options: MySqlConnectOptions,
    ) -> Result<Self, StoreError> {
        let pool = connect_pool(pool_options, options)
            .await
            .map_err(classify)?;
        let galera = is_galera(&pool).await.map_err(classify)?;
        if galera {
            tracing::info!(
                target: "idem",
                "the MariaDB server is a node of a Galera cluster (wsrep_on): the store's statements on existing records are causal (wsrep_sync_wait)"
            );
        }
        Ok(Self::from_pool(pool).with_galera(galera))
    }

    /// A store over an existing pool (the application's own, typically). It does not ask the
    /// server whether it is a node of a Galera cluster, as [`connect`](Self::connect) does: on
    /// one, say so with [`with_galera`](Self::with_galera).
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
    /// retries (`docs/storage.md`, "MariaDB / MySQL"; the figures are in `BENCHMARKS.md`). On a
    /// server without it (MySQL), the first claim learns so and the store claims as without
    /// this.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
    /// use idem_runtime::store::mysql::MySqlStore;
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

    /// Whether the server is a node of a MariaDB Galera cluster (multi-primary): then every
    /// statement of the store that reads or changes an existing record is causal, waiting until
    /// the node has applied every write the cluster committed before it (`SET STATEMENT
    /// wsrep_sync_wait = 7 FOR ..`): a claim that lost its race reads the winner's record, and a
    /// completion finds its claim, even when they were written through another node (a proxy
    /// may send a pool's connections to different nodes). A fresh claim's `INSERT` stays as it
    /// is. [`connect`](Self::connect) and the other `connect_*` find it out (`@@wsrep_on`); set
    /// it for a store made with [`from_pool`](Self::from_pool) (its `migrate` warns when it
    /// finds a Galera node the store was not told of).
    ///
    /// Whether on a cluster or not, a claim or a completion the cluster's certification rolled
    /// back (error 1213) is sent again, still fenced, and a node outside the primary component
    /// (error 1047) is an outage: [`StoreError::Unavailable`], `503` + `Retry-After`, the
    /// handler not run. `docs/storage.md`, "Multi-primary MariaDB (Galera)".
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::MySqlPool) {
    /// use idem_runtime::store::mysql::MySqlStore;
    /// let store = MySqlStore::from_pool(pool).with_galera(true);
    /// assert!(store.is_galera());
    /// # }
    /// ```
    pub fn with_galera(mut self, galera: bool) -> Self {
        self.core.causal = galera;
        self
    }

    /// Whether the store treats its server as a node of a Galera cluster
    /// ([`with_galera`](Self::with_galera)).
    pub fn is_galera(&self) -> bool {
        self.core.causal
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
    /// not at all). The same single `UPDATE` as [`Store::complete`](crate::store::Store::complete);
    /// it locks the record until the caller commits, so keep that transaction short (S18):
    /// meanwhile a duplicate claim of
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
        ops::complete_in(self, conn, lease, completion).await
    }

    async fn purge_once(&self, batch: u32, now: Option<i64>) -> Result<u64, sqlx::Error> {
        let mut tx = crate::store::sql_store::begin_cancel_safe(&self.core.pool).await?;
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
    causal: bool,
) -> sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments> {
    let on = request_path(causal, now);
    // The claim's expiry kept (the engine's completions): no expiry bound or computed.
    let (sql, expire_at) = match completion.expire_at {
        None => (on.complete, None),
        Some(at) => (on.complete_expiring, Some(at.as_millis())),
    };
    let mut query = sqlx::query(sql)
        .bind(RecordState::from(completion.outcome).code())
        .bind(completion.status as i16)
        .bind(headers)
        .bind(&completion.body[..])
        .bind(completion.biz_no.as_deref());
    if let Some(at) = expire_at {
        query = query.bind(at).bind(at).bind(at);
    }
    query
        .bind_now(now)
        .bind_now(now)
        .bind(&lease.key.hash()[..])
        .bind(fence)
        .bind(&lease.operation_id)
}

/// Whether the server behind `pool` is a node of a Galera cluster: `@@wsrep_on` is `1`. A server
/// without the variable (MySQL, MariaDB built without wsrep) is not.
async fn is_galera<'e>(on: impl sqlx::MySqlExecutor<'e>) -> Result<bool, sqlx::Error> {
    match sqlx::query_scalar::<_, i64>(WSREP_ON_SQL)
        .fetch_one(on)
        .await
    {
        Ok(on) => Ok(on == 1),
        // ER_UNKNOWN_SYSTEM_VARIABLE
        Err(e) if error_number(&e) == Some(1193) => Ok(false),
        Err(e) => Err(e),
    }
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

/// Transient error numbers: lock wait timeout (1205), deadlock (1213; on Galera also a
/// transaction that failed certification), too many connections (1040), shutdown in progress
/// (1053), network errors (1152, 1154-1161), read-only server during a failover (1290, 1836),
/// connection killed (1927, MariaDB), disconnected by the server (4031), a Galera node outside
/// the primary component (1047 `WSREP has not yet prepared node for application use`, 1180
/// on a commit there).
/// Not 1153, a packet over `max_allowed_packet`: the same statement fails the same way every
/// time, so a result that large is refused for good.
fn classify(err: sqlx::Error) -> StoreError {
    classify_sqlx(
        err,
        |db| {
            db.try_downcast_ref::<MySqlDatabaseError>()
                .is_some_and(|e| {
                    matches!(
                        e.number(),
                        1205 | 1213 | 1040 | 1047 | 1053 | 1152 | 1154
                            ..=1161 | 1180 | 1290 | 1836 | 1927 | 4031
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
/// and is sent again (`sql_store::send::send_retrying`). Not a lock wait timeout (1205): it
/// already waited its full timeout.
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

    async fn purge_responses_batch(&self, batch: u32) -> Result<u64, StoreError> {
        let now = self.core.now_param();
        let done = self
            .core
            .send(|| {
                sqlx::query(PURGE_RESPONSES_SQL)
                    .bind(now)
                    .bind(now)
                    .bind(i64::from(batch))
                    .execute(&self.core.pool)
            })
            .await?;
        Ok(done.rows_affected())
    }

    const ASKS_LIMIT: bool = true;

    /// `max_allowed_packet` of `conn` (each connection keeps the global value of the time it
    /// connected), read for every completion over 1 MiB: rare, and nothing cached can go
    /// stale when an operator raises the limit.
    async fn completion_limit(conn: &mut MySqlConnection) -> Result<u64, sqlx::Error> {
        sqlx::query_scalar::<_, u64>("SELECT @@max_allowed_packet")
            .fetch_one(conn)
            .await
    }

    async fn select<'e>(
        conn: &'e mut MySqlConnection,
        key: &'e ScopedKey,
        now: Option<i64>,
        causal: bool,
    ) -> Result<Option<RawRecord>, sqlx::Error> {
        let row = sqlx::query(request_path(causal, now).select)
            .bind_now(now)
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
        causal: bool,
    ) -> Result<u64, sqlx::Error> {
        let done = complete_query(lease, fence, completion, headers, now, causal)
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
        causal: bool,
    ) -> Result<MySqlQueryResult, sqlx::Error> {
        sqlx::query(statement(causal, EXTEND_SQL, |c| c.extend))
            .bind(now)
            .bind(by_ms)
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

    // `state` is a `TINYINT`.
    lease_statements! {
        conn: MySqlConnection,
        state: i8,
        owner: |causal| statement(causal, OWNER_SQL, |c| c.owner),
        release: |causal| statement(causal, RELEASE_SQL, |c| c.release),
        abandon: |causal| statement(causal, ABANDON_SQL, |c| c.abandon),
    }

    async fn migrate_on(conn: &mut MySqlConnection, causal: bool) -> Result<(), StoreError> {
        migrate::migrate_on(conn, causal).await
    }

    fn classify(err: sqlx::Error) -> StoreError {
        classify(err)
    }

    fn retryable(err: &sqlx::Error) -> bool {
        retryable(err)
    }
}

impl_store!(MySqlStore);
