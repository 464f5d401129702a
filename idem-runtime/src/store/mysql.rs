//! [`MySqlStore`]: the claim engine on MariaDB / MySQL (table `idem_idempotency_records`).
//!
//! # Statements per path
//!
//! | path | statements |
//! |---|---|
//! | fresh claim | 1 `INSERT` |
//! | replay (completed), in progress | 2: `INSERT` (error 1062) + `SELECT` |
//! | expired record replaced, expired lease taken over | 3: `INSERT` (1062) + `SELECT` + compare-and-swap `UPDATE .. WHERE rev = ?` |
//! | complete, release, extend | 1 `UPDATE` / `DELETE` / `UPDATE` |
//! | get | 1 `SELECT` |
//! | purge_expired | 1 `DELETE .. WHERE expire_at <= ? ORDER BY expire_at LIMIT ?` |
//!
//! So a fresh request costs 2 statements (claim, complete) and a replay 2.
//!
//! # Why not `INSERT .. ON DUPLICATE KEY UPDATE`
//!
//! MySQL has no `RETURNING`, so the claim is a plain `INSERT` and a duplicate is recognized by
//! error number 1062 **and** the name of the index that collided (S15): only a collision on the
//! claim index (`PRIMARY`, the primary key on `key_hash`; `uk_idem_key` is accepted too) means
//! "the key exists"; a 1062 on any other unique index is an error. The error message text is
//! never matched; the index name is the only part read from it, because MySQL reports it
//! nowhere else.
//!
//! `ON DUPLICATE KEY UPDATE` was rejected for two reasons. Its assignments are evaluated left
//! to right, each seeing the columns already assigned, so a conditional takeover
//! (`col = IF(<claimable>, new, col)` for a dozen columns whose own values decide
//! `<claimable>`) changes its own condition half-way. And sqlx connects with `CLIENT_FOUND_ROWS`,
//! under which "unchanged" reports 1 affected row, the same as "inserted": the 0 / 1 / 2 of S16
//! would be ambiguous.
//!
//! The takeover is instead a compare-and-swap on `rev`, a row version every write increments:
//! `UPDATE .. WHERE key_hash = ? AND rev = <rev read>`. Because `rev` always changes, an `UPDATE`
//! that matched its row always changed it, so "matched 0 rows" (fenced out) and "no change" can
//! never be confused, whether or not the connection reports found rows. Completion, release and
//! extension match on `fence` and bump `rev` likewise.

use core::convert::identity;
use core::ops::ControlFlow;
use core::time::Duration;
use std::sync::{Arc, LazyLock};

use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlPoolOptions, MySqlRow};
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

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/mysql");

/// MySQL error number of a duplicate key (`ER_DUP_ENTRY`).
const ER_DUP_ENTRY: u16 = 1062;

/// The claim (S13, S15): a plain insert; the primary key on `key_hash` decides.
const INSERT_SQL: &str = "INSERT INTO idem_idempotency_records \
    (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at) \
    VALUES (?, ?, ?, 0, ?, 1, 1, ?, ?, ?, ?, ?)";

/// Replacing an expired record (S21) or taking over an expired lease (S23): a compare-and-swap
/// on the row version read just before.
const TAKEOVER_SQL: &str = "UPDATE idem_idempotency_records SET \
      idem_key = ?, request_hash = ?, state = 0, operation_id = ?, fence = fence + 1, rev = rev + 1, \
      resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
      locked_at = ?, lease_until = ?, expire_at = ?, created_at = ?, updated_at = ? \
    WHERE key_hash = ? AND rev = ?";

static SELECT_SQL: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLUMNS} FROM idem_idempotency_records WHERE key_hash = ?"));

/// Completion (S18): one short statement, only while the lease's fence is the record's (S23).
const COMPLETE_SQL: &str = "UPDATE idem_idempotency_records SET \
      state = ?, resp_status = ?, resp_headers = ?, resp_body = ?, biz_no = ?, \
      expire_at = COALESCE(?, expire_at), updated_at = ?, completed_at = ?, rev = rev + 1 \
    WHERE key_hash = ? AND fence = ? AND state = 0 AND expire_at > ? AND operation_id = ?";

const RELEASE_SQL: &str = "DELETE FROM idem_idempotency_records \
    WHERE key_hash = ? AND fence = ? AND state = 0 AND expire_at > ? AND operation_id = ?";

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`). The
/// parameters come in the order the other stores bind them (key hash, fence, now, operation id),
/// named once by a derived table.
const ABANDON_SQL: &str = "UPDATE idem_idempotency_records AS r \
    JOIN (SELECT ? AS k, ? AS f, ? AS now, ? AS op) AS p ON r.key_hash = p.k \
    SET r.lease_until = LEAST(r.lease_until, p.now), r.updated_at = p.now, r.rev = r.rev + 1 \
    WHERE r.fence = p.f AND r.state = 0 AND r.operation_id = p.op";

const EXTEND_SQL: &str = "UPDATE idem_idempotency_records SET \
      lease_until = ?, expire_at = GREATEST(expire_at, ?), updated_at = ?, rev = rev + 1 \
    WHERE key_hash = ? AND fence = ? AND state = 0 AND expire_at > ? AND operation_id = ?";

/// Purge along `idx_idem_expire_at`, bounded by `LIMIT` (S21).
const PURGE_SQL: &str = "DELETE FROM idem_idempotency_records \
    WHERE expire_at <= ? ORDER BY expire_at LIMIT ?";

/// The statements of this store, for the benchmark's hand-written baseline. Not a public API.
#[doc(hidden)]
pub mod sql {
    /// The claim insert.
    pub const INSERT: &str = super::INSERT_SQL;
    /// The completion update.
    pub const COMPLETE: &str = super::COMPLETE_SQL;
    /// The read of an existing record.
    pub fn select() -> &'static str {
        &super::SELECT_SQL
    }
}

/// A [`Store`] on MariaDB (10.5 or later; tested on 10.11) or MySQL 8.
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
    pool: MySqlPool,
    clock: Arc<dyn Clock>,
    statements: Arc<StatementCounter>,
}

impl MySqlStore {
    super::codec::sql_store_inherent_methods! {
        pool: MySqlPool,
        connect: MySqlPoolOptions,
        // `select` also returns the `rev` that the takeover's compare-and-swap checks.
        decoded: (Record, i64),
        /// A store over an existing pool (the application's own, typically).
        fn from_pool;
    }

    /// Completes `lease` on `conn`, typically `&mut *tx` of the caller's own
    /// `sqlx::Transaction`, so that the business writes and the snapshot commit together (or
    /// not at all). The same single `UPDATE` as [`Store::complete`]; it locks the record until
    /// the caller commits, so keep that transaction short (S18): meanwhile a duplicate claim of
    /// this key waits in its `INSERT` (InnoDB's duplicate check takes a shared lock on the row),
    /// up to `innodb_lock_wait_timeout`, after which it gets [`StoreError::Unavailable`].
    ///
    /// # Errors
    /// [`StoreError::FencedOut`] when the lease no longer owns the record: roll back.
    pub async fn complete_in(
        &self,
        conn: &mut MySqlConnection,
        lease: &Lease,
        completion: &Completion,
    ) -> Result<(), StoreError> {
        completion.validate()?;
        let now = self.clock.now().as_millis();
        let headers = encode_headers(&completion.headers);
        self.statements.add(1);
        let done = sqlx::query(COMPLETE_SQL)
            .bind(RecordState::from(completion.outcome).code())
            .bind(completion.status as i16)
            .bind(headers)
            .bind(&completion.body[..])
            .bind(completion.biz_no.as_deref())
            .bind(completion.expire_at.map(Timestamp::as_millis))
            .bind(now)
            .bind(now)
            .bind(&lease.key.hash()[..])
            .bind(fence_param(lease.fence)?)
            .bind(now)
            .bind(&lease.operation_id)
            .execute(conn)
            .await
            .map_err(classify)?;
        fenced_unless_one(done.rows_affected(), lease)
    }

    async fn claim_impl(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        req.validate()?;
        let hash = req.request_hash.to_string();
        let operation_id = new_operation_id()?;
        for _ in 0..CLAIM_ATTEMPTS {
            let now = self.clock.now();
            let (lease_until, expire_at) = req.deadlines(now);
            self.statements.add(1);
            let inserted = sqlx::query(INSERT_SQL)
                .bind(&req.key.hash()[..])
                .bind(req.key.readable())
                .bind(&hash)
                .bind(&operation_id)
                .bind(now.as_millis())
                .bind(lease_until.as_millis())
                .bind(expire_at.as_millis())
                .bind(now.as_millis())
                .bind(now.as_millis())
                .execute(&self.pool)
                .await;
            match inserted {
                Ok(_) => {
                    return Ok(Claim::Acquired(Lease {
                        key: req.key.clone(),
                        request_hash: req.request_hash,
                        fence: 1,
                        operation_id,
                        lease_until,
                        expire_at,
                        took_over: false,
                    }));
                }
                Err(e) if is_claim_collision(&e) => {}
                Err(e) => return Err(classify(e)),
            }
            let Some((record, rev)) = self.select(req.key).await? else {
                continue; // released or purged in between: claim again
            };
            let record = match record
                .decide(&req.request_hash, now)
                .settle(record, identity)
            {
                ControlFlow::Break(answer) => return Ok(answer),
                ControlFlow::Continue(record) => record,
            };
            // Expired: a new operation replaces it. Expired lease: the same operation goes on.
            let (op, took_over, created_at, expire_at) = if record.is_expired(now) {
                (operation_id.clone(), false, now, expire_at)
            } else {
                (
                    record.operation_id.clone(),
                    true,
                    record.created_at,
                    record.expire_at.max(lease_until),
                )
            };
            self.statements.add(1);
            let swapped = sqlx::query(TAKEOVER_SQL)
                .bind(req.key.readable())
                .bind(&hash)
                .bind(&op)
                .bind(now.as_millis())
                .bind(lease_until.as_millis())
                .bind(expire_at.as_millis())
                .bind(created_at.as_millis())
                .bind(now.as_millis())
                .bind(&req.key.hash()[..])
                .bind(rev)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
            if swapped.rows_affected() == 1 {
                return Ok(Claim::Acquired(Lease {
                    key: req.key.clone(),
                    request_hash: req.request_hash,
                    fence: record.fence + 1,
                    operation_id: op,
                    lease_until,
                    expire_at,
                    took_over,
                }));
            }
            // Another claim or a completion changed the row since it was read: start over.
        }
        Err(contended(req.key.readable()))
    }
}

/// Applies the pending migrations on `conn`, its own connection: `GET_LOCK` is session-scoped
/// and serializes concurrent migrations.
async fn migrate_on(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('idem_migrate', 60)")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot take the migration lock", e))?;
    if locked != Some(1) {
        return Err(StoreError::Migrate {
            message: "another process held the idem migration lock for 60 s".to_owned(),
            source: None,
        });
    }
    (&mut *conn)
        .execute(sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS idem_sqlx_migrations (\
           version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
           installed_on BIGINT NOT NULL, success BOOLEAN NOT NULL, \
           checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
        ))
        .await
        .map_err(|e| migrate_error("cannot create idem_sqlx_migrations", e))?;
    let applied = applied_migrations!(&mut *conn, "idem_sqlx_migrations");
    for m in pending(&MIGRATOR, &applied)? {
        // DDL commits implicitly in MySQL: record the attempt first, mark it done after, so a
        // migration that died half-way is visible as `success = FALSE` (as sqlx does).
        let started = std::time::Instant::now();
        sqlx::query(
            "INSERT INTO idem_sqlx_migrations \
             (version, description, installed_on, success, checksum, execution_time) \
             VALUES (?, ?, ?, FALSE, ?, -1)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(SystemClock.now().as_millis())
        .bind(&*m.checksum)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
        (&mut *conn)
            .execute(sqlx::raw_sql(&m.sql))
            .await
            .map_err(|e| migrate_error(&format!("migration {} failed", m.version), e))?;
        sqlx::query(
            "UPDATE idem_sqlx_migrations SET success = TRUE, execution_time = ? WHERE version = ?",
        )
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .bind(m.version)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
    }
    sqlx::query("SELECT RELEASE_LOCK('idem_migrate')")
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot release the migration lock", e))?;
    Ok(())
}

/// `true` when `err` is a duplicate key (1062) on the claim index (S15). The number decides;
/// the index name is read from the end of the message (`.. for key 'PRIMARY'` on MariaDB,
/// `.. for key 'idem_idempotency_records.PRIMARY'` on MySQL 8), the only place MySQL reports it.
fn is_claim_collision(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    let Some(my) = db.try_downcast_ref::<MySqlDatabaseError>() else {
        return false;
    };
    my.number() == ER_DUP_ENTRY
        && collided_index(my.message()).is_some_and(|name| {
            let name = name.rsplit('.').next().unwrap_or(name);
            name == "PRIMARY" || name == "uk_idem_key"
        })
}

/// The last single-quoted token of a 1062 message: the index name.
fn collided_index(message: &str) -> Option<&str> {
    let inner = message.trim_end().strip_suffix('\'')?;
    let start = inner.rfind('\'')?;
    Some(&inner[start + 1..])
}

/// Decodes a row of `{COLUMNS}`; returns the record and its `rev`.
fn decode(row: &MySqlRow) -> Result<(Record, i64), StoreError> {
    // `state` is a `TINYINT`, `resp_status` a `SMALLINT`.
    let raw = RawRecord::read::<_, i8, i16>(row, 0).map_err(classify)?;
    let rev = raw.rev;
    Ok((raw.into_record()?, rev))
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

impl Store for MySqlStore {
    super::codec::same_sql_store_methods!();

    fn extend<'a>(
        &'a self,
        lease: &'a Lease,
        by: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            let now = self.clock.now();
            let lease_until = now + by;
            self.statements.add(1);
            let done = sqlx::query(EXTEND_SQL)
                .bind(lease_until.as_millis())
                .bind(lease_until.as_millis())
                .bind(now.as_millis())
                .bind(&lease.key.hash()[..])
                .bind(fence_param(lease.fence)?)
                .bind(now.as_millis())
                .bind(&lease.operation_id)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
            fenced_unless_one(done.rows_affected(), lease)?;
            // Only the holder writes a processing record, so its expiry is the lease's.
            Ok(Lease {
                lease_until,
                expire_at: lease.expire_at.max(lease_until),
                ..lease.clone()
            })
        })
    }

    fn get<'a>(&'a self, key: &'a ScopedKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            let now = self.clock.now();
            Ok(self
                .select(key)
                .await?
                .map(|(r, _)| r)
                .filter(|r| !r.is_expired(now)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{collided_index, is_claim_collision};
    use sqlx::Executor;

    /// S15 against the real server: a 1062 on another unique index is not "the key exists".
    #[tokio::test]
    async fn only_the_claim_index_means_the_key_exists() {
        let Ok(url) = std::env::var("IDEM_TEST_MYSQL_URL") else {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "IDEM_TEST_MYSQL_URL unset"
            );
            eprintln!("note: IDEM_TEST_MYSQL_URL is not set, skipping");
            return;
        };
        let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
        let table = format!("idem_test_dup_{}", std::process::id());
        pool.execute(&*format!(
            "CREATE TABLE {table} (a INT NOT NULL, b INT NOT NULL, PRIMARY KEY (a), UNIQUE KEY uk_other (b))"
        ))
        .await
        .unwrap();
        pool.execute(&*format!("INSERT INTO {table} VALUES (1, 1)"))
            .await
            .unwrap();
        let on_primary = pool
            .execute(&*format!("INSERT INTO {table} VALUES (1, 2)"))
            .await
            .unwrap_err();
        let on_other = pool
            .execute(&*format!("INSERT INTO {table} VALUES (2, 1)"))
            .await
            .unwrap_err();
        pool.execute(&*format!("DROP TABLE {table}")).await.unwrap();
        assert!(is_claim_collision(&on_primary), "{on_primary}");
        assert!(!is_claim_collision(&on_other), "{on_other}");
    }

    #[test]
    fn index_name_of_a_duplicate_entry() {
        assert_eq!(
            collided_index("Duplicate entry '\\x01' for key 'PRIMARY'"),
            Some("PRIMARY")
        );
        assert_eq!(
            collided_index("Duplicate entry 'x' for key 'idem_idempotency_records.PRIMARY'"),
            Some("idem_idempotency_records.PRIMARY")
        );
        assert_eq!(collided_index("no quotes"), None);
    }
}
