//! [`PostgresStore`]: the claim engine on PostgreSQL (table `idem.idempotency_records`).
//!
//! A claim is one `INSERT .. ON CONFLICT (key_hash) DO NOTHING RETURNING ..` that returns the
//! existing row too, so that a replay or an in-progress answer needs no second statement; a
//! takeover or a replaced record adds one conditional `UPDATE .. RETURNING`.
//!
//! `statements` holds the SQL, `migrate` the schema, `replication` what the server says about
//! its standbys ([`Replication`]).
//!
//! The rule: the database's clock decides. Every statement computes "now" itself
//! (`statement_timestamp()`, or the test clock bound in its place), never the application.
//!
//! The SQL, the statements of every path and why not `ON CONFLICT DO UPDATE`:
//! `docs/storage.md`, "PostgreSQL (S14)".

mod migrate;
mod replication;
mod statements;

use core::convert::identity;
use core::ops::ControlFlow;
use core::time::Duration;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Postgres, Row};

pub use self::replication::Replication;
pub use self::statements::NOW_MS_SQL;
use self::statements::{
    ABANDON_SQL, CLAIM_SQL, COMPLETE_EXPIRING_SQL, COMPLETE_SQL, EXTEND_SQL, OWNER_SQL,
    PURGE_RESPONSES_SQL, PURGE_SQL, RELEASE_SQL, SELECT_SQL, TAKEOVER_SQL,
};
use super::clock::{Clock, Timestamp};
use super::error::StoreError;
use super::error::classify_sqlx;
use super::interface::{Claim, ClaimRequest, Completion, Lease, Record, new_operation_id};
use super::sql_store::ops::{self, CLAIM_ATTEMPTS, contended};
use super::sql_store::{
    RawRecord, SqlBackend, SqlCore, Stored, connect_pool, impl_store, lease_statements,
    millis_param, numbered_statements, ping_when_idle,
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

    /// The claim statement (with the read riding along): `$1` key hash, `$2` readable key, `$3`
    /// request hash, `$4` operation id, `$5` clock override (`NULL`), `$6` lease ms, `$7` TTL ms,
    /// `$8` remember ms (0: none).
    pub fn claim() -> &'static str {
        super::statements::CLAIM_SQL
    }
    /// The takeover of an expired record or lease, with the claim's parameters.
    pub fn takeover() -> &'static str {
        super::statements::TAKEOVER_SQL
    }
    /// The completion update.
    pub const COMPLETE: &str = super::statements::COMPLETE_SQL;
}

/// A [`Store`](crate::store::Store) on PostgreSQL (10 or later; tested on 15).
///
/// Every decision about time (is this lease over, has this record expired) is taken by the
/// database's clock, never the application's (see `docs/storage.md`, "Clocks").
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
/// use idem_runtime::store::postgres::PostgresStore;
/// use idem_runtime::store::Store;
/// let store = PostgresStore::connect("postgres://app:app@127.0.0.1/appdb").await?;
/// store.migrate().await?; // schema `idem`, history in `idem._sqlx_migrations`
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresStore {
    core: SqlCore<PostgresStore>,
}

impl PostgresStore {
    /// One batch of a purge phase (`sql`: its statement, binding the clock override and the
    /// batch); returns the rows it changed.
    async fn purge_with(&self, sql: &'static str, batch: u32) -> Result<u64, StoreError> {
        let now = self.core.now_param();
        let done = self
            .core
            .send(|| {
                sqlx::query(sql)
                    .bind(now)
                    .bind(i64::from(batch))
                    .execute(&self.core.pool)
            })
            .await?;
        Ok(done.rows_affected())
    }

    /// The pool options [`connect`](Self::connect) and [`connect_with`](Self::connect_with) use:
    /// up to 10 connections; acquiring one gives up after 5 s ([`StoreError::Unavailable`]); a
    /// connection idle for 500 ms or more is checked (a `ping`) before it is used, one used more
    /// recently is not. sqlx's default checks every one, a round trip more per statement; a
    /// connection the server ends while it is busy fails its statement either way
    /// ([`StoreError::Unavailable`], and sqlx replaces it).
    pub fn pool_options() -> PgPoolOptions {
        ping_when_idle(
            PgPoolOptions::new()
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
    /// use idem_runtime::store::postgres::PostgresStore;
    /// use sqlx::postgres::PgConnectOptions;
    /// let options: PgConnectOptions = "postgres://app:app@db.internal/appdb?sslmode=verify-full".parse()?;
    /// let store = PostgresStore::connect_with(options).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn connect_with(options: PgConnectOptions) -> Result<Self, StoreError> {
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
        pool_options: PgPoolOptions,
        options: PgConnectOptions,
    ) -> Result<Self, StoreError> {
        let pool = connect_pool(pool_options, options)
            .await
            .map_err(classify)?;
        Ok(Self::from_pool(pool))
    }

    /// A store over an existing pool (the application's own, typically).
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            core: SqlCore::new(pool),
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
    pub fn pool(&self) -> &PgPool {
        &self.core.pool
    }

    /// What the server says about its replication, read on one of the store's connections:
    /// for a service that refuses to start unless commits survive a failover.
    ///
    /// ```no_run
    /// # async fn demo(store: idem_runtime::store::postgres::PostgresStore) -> Result<(), Box<dyn std::error::Error>> {
    /// let replication = store.replication().await?;
    /// if !replication.keeps_commits_through_failover() {
    ///     return Err(format!("commits do not wait for a standby: {replication:?}").into());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn replication(&self) -> Result<Replication, StoreError> {
        let mut conn = self.core.pool.acquire().await.map_err(classify)?;
        Replication::read(&mut conn).await
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
    /// this key waits in its `INSERT` (the unique check waits for the row's open update), and
    /// answers once the caller commits or rolls back. A deadlock or serialization failure is not
    /// retried here (the database aborted the caller's transaction): it is
    /// [`StoreError::Unavailable`], and the caller retries its whole transaction.
    ///
    /// ```no_run
    /// # async fn demo(store: idem_runtime::store::postgres::PostgresStore, lease: idem_runtime::store::Lease,
    /// #     completion: idem_runtime::store::Completion) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = store.pool().begin().await?;
    /// sqlx::query("INSERT INTO payments (operation_id, amount) VALUES ($1, 100)")
    ///     .bind(&lease.operation_id)
    ///     .execute(&mut *tx)
    ///     .await?;
    /// store.complete_in(&mut tx, &lease, &completion).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::FencedOut`] when the lease no longer owns the record: roll back.
    pub async fn complete_in(
        &self,
        conn: &mut PgConnection,
        lease: &Lease,
        completion: &Completion,
    ) -> Result<(), StoreError> {
        ops::complete_in(self, conn, lease, completion).await
    }
}

/// The lease of a record this claim just wrote (every time in it by the database's clock).
fn lease(req: &ClaimRequest<'_>, record: Record, operation_id: &str) -> Lease {
    Lease {
        key: req.key.clone(),
        request_hash: req.request_hash,
        fence: record.fence,
        // A takeover keeps the operation's id; a fresh or replaced record has ours.
        took_over: record.operation_id != operation_id,
        operation_id: record.operation_id,
        lease_until: record.lease_until,
        expire_at: record.expire_at,
    }
}

/// The lease of a record the claim statement just inserted: it holds this claim's key, request
/// hash and operation id, so only what the database computed is read back (the fence and the
/// times, columns 5, 12 and 13 of `claimed, record_columns!()`), not the whole row.
fn inserted(
    req: &ClaimRequest<'_>,
    row: &PgRow,
    operation_id: String,
) -> Result<Lease, StoreError> {
    let (fence, lease_until, expire_at): (i64, i64, i64) =
        (|| Ok::<_, sqlx::Error>((row.try_get(5)?, row.try_get(12)?, row.try_get(13)?)))()
            .map_err(classify)?;
    let fence = u64::try_from(fence)
        .map_err(|_| StoreError::corrupt(Some(req.key), format!("fence {fence}")))?;
    Ok(Lease {
        key: req.key.clone(),
        request_hash: req.request_hash,
        fence,
        took_over: false,
        operation_id,
        lease_until: Timestamp::from_millis(lease_until),
        expire_at: Timestamp::from_millis(expire_at),
    })
}

/// Reads a row of `claimed, record_columns!(), now`.
fn read(row: &PgRow) -> Result<RawRecord, sqlx::Error> {
    // `state` and `resp_status` are `SMALLINT`s.
    RawRecord::read::<_, i16, i16>(row, 1)
}

/// Reads and validates a row of `claimed, record_columns!(), now`.
fn decode(row: &PgRow) -> Result<Stored, StoreError> {
    read(row).map_err(classify)?.into_stored()
}

/// Transient SQLSTATEs: connection exceptions (08), serialization failure (40001), deadlock
/// (40P01), lock not available (55P03, e.g. `lock_timeout`), operator intervention / shutdown /
/// a terminated backend (57P), insufficient resources (53), read-only transaction during a
/// failover (25006).
fn classify(err: sqlx::Error) -> StoreError {
    classify_sqlx(
        err,
        |db| {
            db.code().is_some_and(|c| {
                c.starts_with("08")
                    || c.starts_with("53")
                    || c.starts_with("57P")
                    || matches!(&*c, "40001" | "40P01" | "55P03" | "25006")
            })
        },
        |db| db.code().is_some_and(|c| matches!(&*c, "42P01" | "3F000")),
    )
}

/// A statement rolled back as a serialization failure (40001) or deadlock victim (40P01) had no
/// effect and is sent again (`sql_store::send::send_retrying`).
fn retryable(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|c| matches!(&*c, "40001" | "40P01"))
}

impl SqlBackend for PostgresStore {
    type Db = Postgres;
    /// `RETURNING lease_until, expire_at`.
    type Extended = Option<(i64, i64)>;

    const NAME: &'static str = "postgres";

    fn core(&self) -> &SqlCore<Self> {
        &self.core
    }

    async fn claim_key(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        req.validate()?;
        let operation_id = new_operation_id()?;
        let hash = req.request_hash.to_string();
        let (lease_ms, ttl_ms) = (millis_param(req.lease), millis_param(req.ttl));
        let remember_ms = req.remember_param();
        for _ in 0..CLAIM_ATTEMPTS {
            let now = self.core.now_param();
            let bind = |sql: &'static str| {
                sqlx::query(sql)
                    .bind(&req.key.hash()[..])
                    .bind(req.key.readable())
                    .bind(&hash)
                    .bind(&operation_id)
                    .bind(now)
                    .bind(lease_ms)
                    .bind(ttl_ms)
                    .bind(remember_ms)
            };
            let row = self
                .core
                .send(|| bind(CLAIM_SQL).fetch_optional(&self.core.pool))
                .await?;
            let stored = match row {
                Some(row) => {
                    let claimed: bool = row.try_get(0).map_err(classify)?;
                    if claimed {
                        return Ok(Claim::Acquired(inserted(req, &row, operation_id)?));
                    }
                    decode(&row)?
                }
                // The conflicting row was committed after this statement's snapshot: read it.
                None => match self.core.select(req.key).await? {
                    Some(stored) => stored,
                    None => continue, // released or purged in between: claim again
                },
            };
            // Decided by the database's clock, read with the row.
            if let ControlFlow::Break(answer) = stored
                .record
                .decide(&req.request_hash, stored.now)
                .settle(stored.record, identity)
            {
                return Ok(answer);
            }
            let Some(row) = self
                .core
                .send(|| bind(TAKEOVER_SQL).fetch_optional(&self.core.pool))
                .await?
            else {
                continue; // another claim was faster, or the row changed: look again
            };
            let record = decode(&row)?.record;
            return Ok(Claim::Acquired(lease(req, record, &operation_id)));
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
        conn: PgConnection,
        int: i16,
        read: read,
        select: SELECT_SQL,
        complete: COMPLETE_SQL,
        complete_expiring: COMPLETE_EXPIRING_SQL,
        extend: EXTEND_SQL,
    }

    // `state` is a `SMALLINT`.
    lease_statements! {
        conn: PgConnection,
        state: i16,
        owner: |_| OWNER_SQL,
        release: |_| RELEASE_SQL,
        abandon: |_| ABANDON_SQL,
    }

    async fn migrate_on(conn: &mut PgConnection, _causal: bool) -> Result<(), StoreError> {
        migrate::migrate_on(conn).await
    }

    fn classify(err: sqlx::Error) -> StoreError {
        classify(err)
    }

    fn retryable(err: &sqlx::Error) -> bool {
        retryable(err)
    }
}

impl_store!(PostgresStore);
