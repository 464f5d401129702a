//! [`PostgresStore`]: the claim engine on PostgreSQL (table `idem.idempotency_records`).
//!
//! A claim is one `INSERT .. ON CONFLICT (key_hash) DO NOTHING RETURNING ..` that returns the
//! existing row too, so that a replay or an in-progress answer needs no second statement; a
//! takeover or a replaced record adds one conditional `UPDATE .. RETURNING`.
//!
//! The rule: the database's clock decides. Every statement computes "now" itself
//! (`statement_timestamp()`, or the test clock bound in its place), never the application.
//!
//! The SQL, the statements of every path and why not `ON CONFLICT DO UPDATE`:
//! `docs/storage.md`, "PostgreSQL (S14)".

use core::convert::identity;
use core::ops::ControlFlow;
use core::time::Duration;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Executor, Postgres, Row};

use super::clock::{Clock, Timestamp};
use super::error::StoreError;
use super::error::classify_sqlx;
use super::interface::{Claim, ClaimRequest, Completion, Lease, Record, new_operation_id};
use super::migrate::{history, migrate_error, pending};
use super::sql_store::ops::{self, CLAIM_ATTEMPTS, contended};
use super::sql_store::{
    RawRecord, SqlBackend, SqlCore, Stored, impl_store, lease_statements, millis_param,
    numbered_statements, ping_when_idle, record_columns,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Checksums (SHA-384, hex) that idem 0.1.0 recorded for migration files whose text differs in
/// this build, accepted as the files' own, so that a database it migrated still starts.
///
/// `20261130000001` holds `CREATE SCHEMA IF NOT EXISTS idem;`, so that the file stands alone for
/// other tools (`psql -f`); 0.1.0's text of it lacked the statement, which is a no-op wherever
/// the table exists (the runner creates the schema before its history table), so a database
/// migrated with either text is the same. A version added instead could not make the file stand
/// alone, and one before it would be applied out of order on existing databases.
const EARLIER_CHECKSUMS: &[(i64, &str)] = &[(
    20261130000001,
    "bd1c0b9a7c6ddb60d8550db1413eb315db89f9da2d8020ab220d27fcdd4902d6a26c2f932e36d831cda498a124b3df3c",
)];

/// Key of the advisory lock that serializes concurrent `migrate()` calls ("idem" in ASCII).
const MIGRATION_LOCK: i64 = 0x6964_656d;

/// "Now" in milliseconds since the Unix epoch by the database's clock: `statement_timestamp()`,
/// the start of the current statement, one value wherever the statement reads it (unlike
/// `clock_timestamp()`), and the statement's own time inside a caller's transaction too (unlike
/// `now()`, the transaction's start). Parameter `$n` is the store's clock override, `NULL`
/// unless `with_clock` set one (tests).
macro_rules! now {
    ($n:literal) => {
        concat!("COALESCE($", $n, "::bigint, ", db_now!(), ")")
    };
}

macro_rules! db_now {
    () => {
        "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint"
    };
}

/// The SQL expression the store reads the time from: milliseconds since the Unix epoch by the
/// database's clock (`statement_timestamp()`), for tools that query the table beside the store.
pub const NOW_MS_SQL: &str = db_now!();

/// The claim (S13, S14): insert, or return the existing row from the statement's snapshot.
/// `$5` is the clock override, `$6` the lease and `$7` the TTL in ms; every column that holds a
/// time is computed here, from the database's clock. The last column is that "now".
const CLAIM_SQL: &str = concat!(
    "WITH claimed AS ( \
       INSERT INTO idem.idempotency_records \
         (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at) \
       VALUES ($1, $2, $3, 0, $4, 1, 1, ",
    now!("5"),
    ", ",
    now!("5"),
    " + $6::bigint, ",
    now!("5"),
    " + GREATEST($6::bigint, $7::bigint), ",
    now!("5"),
    ", ",
    now!("5"),
    ") \
       ON CONFLICT (key_hash) DO NOTHING \
       RETURNING ",
    record_columns!(),
    ", locked_at AS db_now \
     ) \
     SELECT TRUE AS claimed, ",
    record_columns!(),
    ", db_now FROM claimed \
     UNION ALL \
     SELECT FALSE AS claimed, ",
    record_columns!(),
    ", ",
    now!("5"),
    " FROM idem.idempotency_records \
      WHERE key_hash = $1 AND NOT EXISTS (SELECT 1 FROM claimed)"
);

/// Replacing an expired record (S21: a new operation id) or taking over an expired lease of the
/// same request (S23: same operation id), with the parameters of [`CLAIM_SQL`]. The condition
/// is re-checked on the latest row version, so only one of concurrent takeovers returns a row.
/// `SET` sees the old row.
///
/// The operation id changes only when the record has expired by the database's clock: it is
/// logically absent (S21), so this is a new operation, and the old one's zombie (old id, lower
/// fence) stays fenced out. An ended lease of the same request keeps its id: the operation goes
/// on, and its effects may already exist under that id (S22, S23).
const TAKEOVER_SQL: &str = concat!(
    "UPDATE idem.idempotency_records AS r SET \
       idem_key = $2, \
       request_hash = $3, \
       state = 0, \
       operation_id = CASE WHEN r.expire_at <= ",
    now!("5"),
    " THEN $4 ELSE r.operation_id END, \
       fence = r.fence + 1, \
       rev = r.rev + 1, \
       resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
       locked_at = ",
    now!("5"),
    ", \
       lease_until = ",
    now!("5"),
    " + $6::bigint, \
       expire_at = CASE WHEN r.expire_at <= ",
    now!("5"),
    " \
         THEN ",
    now!("5"),
    " + GREATEST($6::bigint, $7::bigint) \
         ELSE GREATEST(r.expire_at, ",
    now!("5"),
    " + $6::bigint) END, \
       created_at = CASE WHEN r.expire_at <= ",
    now!("5"),
    " THEN ",
    now!("5"),
    " ELSE r.created_at END, \
       updated_at = ",
    now!("5"),
    " \
     WHERE r.key_hash = $1 \
       AND (r.expire_at <= ",
    now!("5"),
    " \
            OR (r.state = 0 AND r.lease_until <= ",
    now!("5"),
    " AND r.request_hash = $3)) \
     RETURNING TRUE AS claimed, ",
    record_columns!(),
    ", ",
    now!("5")
);

/// The row of a key and the database's "now" (`$2`: the clock override).
const SELECT_SQL: &str = concat!(
    "SELECT FALSE AS claimed, ",
    record_columns!(),
    ", ",
    now!("2"),
    " FROM idem.idempotency_records WHERE key_hash = $1"
);

/// Completion (S18): one short statement, only while the lease's fence and operation id are the
/// record's and it is processing (S23). No expiry condition: a result nobody superseded is
/// stored even when it comes after `expire_at`. `$8` is an absolute expiry for the snapshot (or
/// `NULL`), `$9` the clock override.
const COMPLETE_SQL: &str = concat!(
    "UPDATE idem.idempotency_records SET \
       state = $3, resp_status = $4, resp_headers = $5, resp_body = $6, biz_no = $7, \
       expire_at = COALESCE($8, expire_at), updated_at = ",
    now!("9"),
    ", completed_at = ",
    now!("9"),
    ", \
       rev = rev + 1 \
     WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $10"
);

/// Who owns a record: read when a completion matched no row (see `completed_earlier`).
const OWNER_SQL: &str =
    "SELECT state, fence, operation_id FROM idem.idempotency_records WHERE key_hash = $1";

const RELEASE_SQL: &str = "DELETE FROM idem.idempotency_records \
    WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $3";

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`).
const ABANDON_SQL: &str = concat!(
    "UPDATE idem.idempotency_records SET \
       lease_until = LEAST(lease_until, ",
    now!("4"),
    "), updated_at = ",
    now!("4"),
    ", rev = rev + 1 \
     WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $3"
);

/// Renews a lease for `$4` ms from now; the record lives at least as long.
const EXTEND_SQL: &str = concat!(
    "UPDATE idem.idempotency_records SET \
       lease_until = ",
    now!("5"),
    " + $4::bigint, \
       expire_at = GREATEST(expire_at, ",
    now!("5"),
    " + $4::bigint), \
       updated_at = ",
    now!("5"),
    ", rev = rev + 1 \
     WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $3 \
     RETURNING lease_until, expire_at"
);

/// Purge along `idx_idem_expire_at`, bounded by `LIMIT`, in `(expire_at, key_hash)` order,
/// skipping rows another transaction holds (S21). The batch is a materialized CTE: as
/// `key_hash IN (SELECT .. LIMIT ..)` the planner may re-run the subquery and delete more than a
/// batch. The outer condition is re-checked on the latest row version, so a record replaced by
/// a concurrent claim is never deleted: only records logically absent (expired by the
/// database's clock) are.
const PURGE_SQL: &str = concat!(
    "WITH batch AS MATERIALIZED ( \
       SELECT key_hash FROM idem.idempotency_records WHERE expire_at <= ",
    now!("1"),
    " \
       ORDER BY expire_at, key_hash LIMIT $2 FOR UPDATE SKIP LOCKED) \
     DELETE FROM idem.idempotency_records r USING batch \
     WHERE r.key_hash = batch.key_hash AND r.expire_at <= ",
    now!("1")
);

/// The statements of this store, for the benchmark's hand-written baseline. Not a public API.
#[doc(hidden)]
pub mod sql {
    /// The claim statement (with the read riding along): `$1` key hash, `$2` readable key, `$3`
    /// request hash, `$4` operation id, `$5` clock override (`NULL`), `$6` lease ms, `$7` TTL ms.
    pub fn claim() -> &'static str {
        super::CLAIM_SQL
    }
    /// The takeover of an expired record or lease, with the claim's parameters.
    pub fn takeover() -> &'static str {
        super::TAKEOVER_SQL
    }
    /// The completion update.
    pub const COMPLETE: &str = super::COMPLETE_SQL;
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

    /// Connects a pool configured by `pool_options` (size, timeouts, hooks) with `options`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn connect_with_pool(
        pool_options: PgPoolOptions,
        options: PgConnectOptions,
    ) -> Result<Self, StoreError> {
        let pool = pool_options.connect_with(options).await.map_err(classify)?;
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

/// Applies the pending migrations on `conn`, its own connection: the advisory lock is
/// session-scoped and serializes concurrent migrations. Refuses a standby, and warns when the
/// server streams to standbys without waiting for them (see [`Replication`]).
async fn migrate_on(conn: &mut PgConnection) -> Result<(), StoreError> {
    let replication = Replication::read(&mut *conn).await?;
    if replication.standby {
        return Err(StoreError::Config {
            message: "this PostgreSQL server is a standby (`pg_is_in_recovery()`): point the store at the primary; a claim cannot be written here, and a replay read from a standby may miss the latest completion and answer wrongly".to_owned(),
            source: None,
        });
    }
    if replication.streaming_standbys > 0 && !replication.keeps_commits_through_failover() {
        tracing::warn!(target: "idem",
            standbys = replication.streaming_standbys,
            synchronous_commit = %replication.synchronous_commit,
            synchronous_standby_names = %replication.synchronous_standby_names,
            "PostgreSQL acknowledges commits before a standby holds them: a failover to a standby can lose acknowledged claims, and a lost claim lets a retry run its operation again under a new operation id; set `synchronous_standby_names` (and `synchronous_commit = on`) on the primary (docs/storage.md, \"Replicated and sharded stores\")");
    }
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot take the migration lock", e))?;
    (&mut *conn)
        .execute(sqlx::raw_sql(
            "CREATE SCHEMA IF NOT EXISTS idem; \
         CREATE TABLE IF NOT EXISTS idem._sqlx_migrations (\
           version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
           installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, \
           checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)",
        ))
        .await
        .map_err(|e| migrate_error("cannot create schema `idem` and its history table", e))?;
    let applied = history(
        sqlx::query_as("SELECT version, checksum, success FROM idem._sqlx_migrations")
            .fetch_all(&mut *conn)
            .await,
        "idem._sqlx_migrations",
    )?;
    for m in pending(&MIGRATOR, &applied, EARLIER_CHECKSUMS)? {
        let started = std::time::Instant::now();
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| migrate_error("cannot begin", e))?;
        (&mut *tx)
            .execute(sqlx::raw_sql(m.sql.clone()))
            .await
            .map_err(|e| migrate_error(&format!("migration {} failed", m.version), e))?;
        sqlx::query(
            "INSERT INTO idem._sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ($1, $2, TRUE, $3, $4)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(&*m.checksum)
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
        tx.commit()
            .await
            .map_err(|e| migrate_error("cannot commit the migration", e))?;
    }
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot release the migration lock", e))?;
    Ok(())
}

/// What a PostgreSQL server says about its replication, as the store's own sessions see it
/// ([`PostgresStore::replication`]): whether a commit the store was told about survives a
/// failover to a standby.
///
/// A commit waits for a standby only when the primary names one in
/// `synchronous_standby_names` **and** the session's `synchronous_commit` is `on`,
/// `remote_write` or `remote_apply`; with `off` or `local`, or no name, PostgreSQL replicates
/// asynchronously, and a failover can lose the last acknowledged claims.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replication {
    /// The server is itself a standby (`pg_is_in_recovery()`): the store refuses it.
    pub standby: bool,
    /// The session's `synchronous_commit`.
    pub synchronous_commit: String,
    /// The server's `synchronous_standby_names` (empty: none).
    pub synchronous_standby_names: String,
    /// Standbys streaming from this server now (`pg_stat_replication`).
    pub streaming_standbys: i64,
}

impl Replication {
    async fn read(conn: &mut PgConnection) -> Result<Self, StoreError> {
        let (standby, synchronous_commit, synchronous_standby_names, streaming_standbys) =
            sqlx::query_as(
                "SELECT pg_is_in_recovery(), current_setting('synchronous_commit'), \
                 current_setting('synchronous_standby_names'), \
                 (SELECT count(*) FROM pg_stat_replication)",
            )
            .fetch_one(&mut *conn)
            .await
            .map_err(classify)?;
        Ok(Replication {
            standby,
            synchronous_commit,
            synchronous_standby_names,
            streaming_standbys,
        })
    }

    /// `true` when every commit of the store's sessions waits until a standby holds it: a
    /// failover to that standby keeps every claim and completion idem acknowledged.
    pub fn keeps_commits_through_failover(&self) -> bool {
        !self.synchronous_standby_names.trim().is_empty()
            && matches!(
                self.synchronous_commit.as_str(),
                "on" | "remote_write" | "remote_apply"
            )
    }
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
/// effect and is sent again (`sql_store::statements::send_retrying`).
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
        let now = self.core.now_param();
        let done = self
            .core
            .send(|| {
                sqlx::query(PURGE_SQL)
                    .bind(now)
                    .bind(i64::from(batch))
                    .execute(&self.core.pool)
            })
            .await?;
        Ok(done.rows_affected())
    }

    numbered_statements! {
        conn: PgConnection,
        int: i16,
        read: read,
        select: SELECT_SQL,
        complete: COMPLETE_SQL,
        extend: EXTEND_SQL,
    }

    // `state` is a `SMALLINT`.
    lease_statements! {
        conn: PgConnection,
        state: i16,
        owner: OWNER_SQL,
        release: RELEASE_SQL,
        abandon: ABANDON_SQL,
    }

    async fn migrate_on(conn: &mut PgConnection) -> Result<(), StoreError> {
        migrate_on(conn).await
    }

    fn classify(err: sqlx::Error) -> StoreError {
        classify(err)
    }

    fn retryable(err: &sqlx::Error) -> bool {
        retryable(err)
    }
}

impl_store!(PostgresStore);
