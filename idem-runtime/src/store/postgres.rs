//! [`PostgresStore`]: the claim engine on PostgreSQL (table `idem.idempotency_records`).
//!
//! # Statements per path
//!
//! | path | statements |
//! |---|---|
//! | fresh claim | 1: the claim statement below |
//! | replay (completed), in progress | 1: the same statement; the existing row rides along |
//! | expired record replaced, expired lease taken over | 2: the claim statement + a conditional `UPDATE .. RETURNING` |
//! | a concurrent claim committed after the statement's snapshot (rare race) | +1 `SELECT` |
//! | complete, release, extend | 1 `UPDATE` / `DELETE` / `UPDATE .. RETURNING` |
//! | get | 1 `SELECT` |
//! | purge_expired | 1 `WITH batch AS MATERIALIZED (SELECT .. LIMIT $2 FOR UPDATE SKIP LOCKED) DELETE ..` |
//!
//! So a fresh request costs 2 statements (claim, complete) and a replay 1.
//!
//! # The claim statement
//!
//! `INSERT .. ON CONFLICT (key_hash) DO NOTHING RETURNING ..` inside a CTE (S13, S14): the
//! unique index decides, never a prior `SELECT`. When it inserts nothing, the `UNION ALL` branch
//! returns the existing row from the statement's snapshot, so a replay or an in-progress answer
//! needs no second round trip. A row committed by a concurrent claim *after* that snapshot is
//! invisible to the branch; one plain `SELECT` then follows.
//!
//! An expired record (S21) or an expired lease of the same request hash (S23) is then claimed
//! by an `UPDATE .. WHERE key_hash = $1 AND <claimable> RETURNING ..`: PostgreSQL re-checks the
//! condition on the latest row version under the row lock, so of two concurrent takeovers exactly
//! one returns a row, with `fence + 1`.
//!
//! **Why not `ON CONFLICT DO UPDATE .. WHERE <claimable>`**, which would also take over in the
//! first statement: `DO UPDATE` locks the conflicting row even when its `WHERE` is false, so
//! every replay and every in-progress answer would be a write transaction — one transaction id
//! consumed per replay (measured: 100 replays, 100 xids; `DO NOTHING`: none), a WAL record, and a
//! commit that waits for the WAL flush under `synchronous_commit = on`; replays of one key would
//! also queue on its row lock. Measured server-side with pgbench on a replay: 0.16-0.21 ms with
//! `DO UPDATE`, 0.11-0.15 ms with `DO NOTHING`, 0.06 ms for a bare `SELECT` (`BENCHMARKS.md`).
//! Replays are frequent, takeovers rare (a crash, an expired key reused): the rare path pays the
//! second statement.

use core::convert::identity;
use core::ops::ControlFlow;
use core::time::Duration;
use std::sync::{Arc, LazyLock};

use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Executor, Row};

use super::codec::{
    CLAIM_ATTEMPTS, COLUMNS, RawRecord, StatementCounter, applied_migrations, contended,
    encode_headers, fence_param, fenced_unless_one,
};
use super::error::classify_sqlx;
use super::migrate::{Applied, migrate_error, pending};
use super::{
    BoxFuture, Claim, ClaimRequest, Clock, Completion, Lease, Record, RecordState, ScopedKey,
    Store, StoreError, SystemClock, Timestamp, new_operation_id,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Key of the advisory lock that serializes concurrent `migrate()` calls ("idem" in ASCII).
const MIGRATION_LOCK: i64 = 0x6964_656d;

/// The claim (S13, S14): insert, or return the existing row from the statement's snapshot.
static CLAIM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH claimed AS ( \
           INSERT INTO idem.idempotency_records \
             (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at) \
           VALUES ($1, $2, $3, 0, $4, 1, 1, $5, $6, $7, $5, $5) \
           ON CONFLICT (key_hash) DO NOTHING \
           RETURNING {COLUMNS} \
         ) \
         SELECT TRUE AS claimed, {COLUMNS} FROM claimed \
         UNION ALL \
         SELECT FALSE AS claimed, {COLUMNS} FROM idem.idempotency_records \
          WHERE key_hash = $1 AND NOT EXISTS (SELECT 1 FROM claimed)"
    )
});

/// Replacing an expired record (S21: a new operation id) or taking over an expired lease of the
/// same request (S23: same operation id); `$5` is now. The condition is re-checked on the latest
/// row version, so only one of concurrent takeovers returns a row. `SET` sees the old row.
static TAKEOVER_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE idem.idempotency_records AS r SET \
           idem_key = $2, \
           request_hash = $3, \
           state = 0, \
           operation_id = CASE WHEN r.expire_at <= $5 THEN $4 ELSE r.operation_id END, \
           fence = r.fence + 1, \
           rev = r.rev + 1, \
           resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
           locked_at = $5, \
           lease_until = $6, \
           expire_at = CASE WHEN r.expire_at <= $5 THEN $7 ELSE GREATEST(r.expire_at, $6) END, \
           created_at = CASE WHEN r.expire_at <= $5 THEN $5 ELSE r.created_at END, \
           updated_at = $5 \
         WHERE r.key_hash = $1 \
           AND (r.expire_at <= $5 \
                OR (r.state = 0 AND r.lease_until <= $5 AND r.request_hash = $3)) \
         RETURNING TRUE AS claimed, {COLUMNS}"
    )
});

static SELECT_SQL: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT FALSE AS claimed, {COLUMNS} FROM idem.idempotency_records WHERE key_hash = $1")
});

/// Completion (S18): one short statement, only while the lease's fence is the record's (S23).
const COMPLETE_SQL: &str = "UPDATE idem.idempotency_records SET \
      state = $3, resp_status = $4, resp_headers = $5, resp_body = $6, biz_no = $7, \
      expire_at = COALESCE($8, expire_at), updated_at = $9, completed_at = $9, rev = rev + 1 \
    WHERE key_hash = $1 AND fence = $2 AND state = 0 AND expire_at > $9 AND operation_id = $10";

const RELEASE_SQL: &str = "DELETE FROM idem.idempotency_records \
    WHERE key_hash = $1 AND fence = $2 AND state = 0 AND expire_at > $3 AND operation_id = $4";

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`).
const ABANDON_SQL: &str = "UPDATE idem.idempotency_records SET \
      lease_until = LEAST(lease_until, $3), updated_at = $3, rev = rev + 1 \
    WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $4";

const EXTEND_SQL: &str = "UPDATE idem.idempotency_records SET \
      lease_until = $3, expire_at = GREATEST(expire_at, $3), updated_at = $4, rev = rev + 1 \
    WHERE key_hash = $1 AND fence = $2 AND state = 0 AND expire_at > $4 AND operation_id = $5 \
    RETURNING expire_at";

/// Purge along `idx_idem_expire_at`, bounded by `LIMIT`, skipping rows a claim holds (S21).
/// The batch is a materialized CTE: as `key_hash IN (SELECT .. LIMIT ..)` the planner may
/// re-run the subquery and delete more than a batch. The outer condition is re-checked on the
/// latest row version, so a record replaced by a concurrent claim is never deleted.
const PURGE_SQL: &str = "WITH batch AS MATERIALIZED ( \
      SELECT key_hash FROM idem.idempotency_records WHERE expire_at <= $1 \
      ORDER BY expire_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
    DELETE FROM idem.idempotency_records r USING batch \
    WHERE r.key_hash = batch.key_hash AND r.expire_at <= $1";

/// The statements of this store, for the benchmark's hand-written baseline. Not a public API.
#[doc(hidden)]
pub mod sql {
    /// The claim statement (with the read riding along).
    pub fn claim() -> &'static str {
        &super::CLAIM_SQL
    }
    /// The takeover of an expired record or lease.
    pub fn takeover() -> &'static str {
        &super::TAKEOVER_SQL
    }
    /// The completion update.
    pub const COMPLETE: &str = super::COMPLETE_SQL;
}

/// A [`Store`] on PostgreSQL (10 or later; tested on 15).
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
/// use idem_runtime::store::{PostgresStore, Store};
/// let store = PostgresStore::connect("postgres://app:app@127.0.0.1/appdb").await?;
/// store.migrate().await?; // schema `idem`, history in `idem._sqlx_migrations`
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    statements: Arc<StatementCounter>,
}

impl PostgresStore {
    super::codec::sql_store_inherent_methods! {
        pool: PgPool,
        connect: PgPoolOptions,
        decoded: Record,
        /// A store over an existing pool (the application's own, typically).
        fn from_pool;
    }

    /// Completes `lease` on `conn`, typically `&mut *tx` of the caller's own
    /// `sqlx::Transaction`, so that the business writes and the snapshot commit together (or
    /// not at all). The same single `UPDATE` as [`Store::complete`]; it locks the record until
    /// the caller commits, so keep that transaction short (S18): meanwhile a duplicate claim of
    /// this key waits in its `INSERT` (the unique check waits for the row's open update), and
    /// answers once the caller commits or rolls back.
    ///
    /// ```no_run
    /// # async fn demo(store: idem_runtime::store::PostgresStore, lease: idem_runtime::store::Lease,
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
        completion.validate()?;
        let now = self.clock.now().as_millis();
        let headers = encode_headers(&completion.headers);
        self.statements.add(1);
        let done = sqlx::query(COMPLETE_SQL)
            .bind(&lease.key.hash()[..])
            .bind(fence_param(lease.fence)?)
            .bind(RecordState::from(completion.outcome).code())
            .bind(completion.status as i16)
            .bind(headers)
            .bind(&completion.body[..])
            .bind(completion.biz_no.as_deref())
            .bind(completion.expire_at.map(Timestamp::as_millis))
            .bind(now)
            .bind(&lease.operation_id)
            .execute(conn)
            .await
            .map_err(classify)?;
        fenced_unless_one(done.rows_affected(), lease)
    }

    async fn claim_impl(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        req.validate()?;
        let operation_id = new_operation_id()?;
        let hash = req.request_hash.to_string();
        for _ in 0..CLAIM_ATTEMPTS {
            let now = self.clock.now();
            let (lease_until, expire_at) = req.deadlines(now);
            let bind = |sql: &'static str| {
                sqlx::query(sql)
                    .bind(&req.key.hash()[..])
                    .bind(req.key.readable())
                    .bind(&hash)
                    .bind(&operation_id)
                    .bind(now.as_millis())
                    .bind(lease_until.as_millis())
                    .bind(expire_at.as_millis())
            };
            self.statements.add(1);
            let mut row = bind(&CLAIM_SQL)
                .fetch_optional(&self.pool)
                .await
                .map_err(classify)?;
            if row.is_none() {
                // The conflicting row was committed after this statement's snapshot: read it.
                self.statements.add(1);
                row = sqlx::query(&SELECT_SQL)
                    .bind(&req.key.hash()[..])
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)?;
            }
            let Some(row) = row else {
                continue; // released or purged in between: claim again
            };
            let claimed: bool = row.try_get(0).map_err(classify)?;
            let record = decode(&row)?;
            if !claimed {
                if let ControlFlow::Break(answer) = record
                    .decide(&req.request_hash, now)
                    .settle(record, identity)
                {
                    return Ok(answer);
                }
                self.statements.add(1);
                let Some(row) = bind(&TAKEOVER_SQL)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)?
                else {
                    continue; // another claim was faster, or the row changed: look again
                };
                let record = decode(&row)?;
                return Ok(Claim::Acquired(self.lease(
                    req,
                    record,
                    &operation_id,
                    lease_until,
                )));
            }
            return Ok(Claim::Acquired(self.lease(
                req,
                record,
                &operation_id,
                lease_until,
            )));
        }
        Err(contended(req.key.readable()))
    }

    /// The lease of a record this claim just wrote.
    fn lease(
        &self,
        req: &ClaimRequest<'_>,
        record: Record,
        operation_id: &str,
        lease_until: Timestamp,
    ) -> Lease {
        Lease {
            key: req.key.clone(),
            request_hash: req.request_hash,
            fence: record.fence,
            // A takeover keeps the operation's id; a fresh or replaced record has ours.
            took_over: record.operation_id != operation_id,
            operation_id: record.operation_id,
            lease_until,
            expire_at: record.expire_at,
        }
    }
}

/// Applies the pending migrations on `conn`, its own connection: the advisory lock is
/// session-scoped and serializes concurrent migrations.
async fn migrate_on(conn: &mut PgConnection) -> Result<(), StoreError> {
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
    let applied = applied_migrations!(&mut *conn, "idem._sqlx_migrations");
    for m in pending(&MIGRATOR, &applied)? {
        let started = std::time::Instant::now();
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| migrate_error("cannot begin", e))?;
        (&mut *tx)
            .execute(sqlx::raw_sql(&m.sql))
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

/// Decodes a row of `claimed, {COLUMNS}`.
fn decode(row: &PgRow) -> Result<Record, StoreError> {
    // `state` and `resp_status` are `SMALLINT`s.
    RawRecord::read::<_, i16, i16>(row, 1)
        .map_err(classify)?
        .into_record()
}

/// Transient SQLSTATEs: connection exceptions (08), serialization failure (40001), deadlock
/// (40P01), lock not available (55P03), operator intervention / shutdown (57P), insufficient
/// resources (53), read-only transaction during a failover (25006).
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

impl Store for PostgresStore {
    super::codec::same_sql_store_methods!();
    super::codec::returning_store_methods!();
}
