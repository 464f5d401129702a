//! The claim of a [`MySqlStore`](super::MySqlStore): its two strategies (the plain `INSERT`,
//! and the opt-in `INSERT .. ON DUPLICATE KEY UPDATE .. RETURNING` of MariaDB), then the
//! compare-and-swap that replaces an expired record or takes an ended lease over.

use core::convert::identity;
use core::ops::ControlFlow;

use sqlx::Row as _;
use sqlx::mysql::{MySql, MySqlDatabaseError, MySqlQueryResult};

use super::statements::{
    BindNow, CLAIM_RETURNING_KEY_HASH, REPLACE_SQL, TAKEOVER_SQL, request_path, statement,
};
use super::{MySqlStore, classify, error_number, read};
use crate::store::clock::Timestamp;
use crate::store::error::StoreError;
use crate::store::interface::{Claim, ClaimRequest, Lease, new_operation_id};
use crate::store::sql_store::ops::{CLAIM_ATTEMPTS, contended};
use crate::store::sql_store::{Stored, millis_param};

/// MySQL error number of a duplicate key (`ER_DUP_ENTRY`).
const ER_DUP_ENTRY: u16 = 1062;

/// MySQL error number of a statement the server cannot parse (`ER_PARSE_ERROR`).
const ER_PARSE_ERROR: u16 = 1064;

/// Whether the store claims with `INSERT .. RETURNING`: not asked for ([`Returning::NO`], the
/// default, as on a server that lacks it), asked for and not tried yet, or working.
#[derive(Debug)]
pub(super) struct Returning(std::sync::atomic::AtomicU8);

impl Default for Returning {
    fn default() -> Self {
        Self(std::sync::atomic::AtomicU8::new(Self::NO))
    }
}

impl Returning {
    /// Asked for, not tried yet.
    pub(super) fn untried() -> Self {
        Self(Self::UNKNOWN.into())
    }

    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;

    fn get(&self) -> u8 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set(&self, to: u8) {
        self.0.store(to, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `Store::claim`: the claim statement of the store's strategy, then, when the record it met
/// is claimable, the compare-and-swap that replaces it or takes its lease over.
pub(super) async fn claim(store: &MySqlStore, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
    req.validate()?;
    let hash = req.request_hash.to_string();
    let operation_id = new_operation_id()?;
    let (lease_ms, ttl_ms) = (millis_param(req.lease), millis_param(req.ttl));
    let remember_ms = req.remember_param();
    for _ in 0..CLAIM_ATTEMPTS {
        let now = store.core.now_param();
        let met = match store
            .claim_returning(req, &hash, &operation_id, now)
            .await?
        {
            Some(met) => met,
            None => store.claim_plain(req, &hash, &operation_id, now).await?,
        };
        let stored = match met {
            Met::Inserted {
                lease_until,
                expire_at,
            } => {
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
            Met::Existing(Some(stored)) => stored,
            Met::Existing(None) => continue, // released or purged in between: claim again
        };
        // Decided by the database's clock, read with the row.
        let record = match stored
            .record
            .decide(&req.request_hash, stored.now)
            .settle(stored.record, identity)
        {
            ControlFlow::Break(answer) => return Ok(answer),
            ControlFlow::Continue(record) => record,
        };
        let rev = stored.rev;
        if record.is_expired(stored.now) {
            // Expired: logically absent (S21), a new operation replaces it.
            let replay_ms = lease_ms.max(ttl_ms);
            let expire_ms = replay_ms.max(remember_ms);
            let done = store
                .core
                .send(|| {
                    sqlx::query(statement(store.core.causal, REPLACE_SQL, |c| c.replace))
                        .bind(req.key.readable())
                        .bind(&hash)
                        .bind(&operation_id)
                        .bind(remember_ms)
                        .bind(now)
                        .bind(replay_ms)
                        .bind(now)
                        .bind(now)
                        .bind(lease_ms)
                        .bind(now)
                        .bind(expire_ms)
                        .bind(now)
                        .bind(now)
                        .bind(&req.key.hash()[..])
                        .bind(rev)
                        .bind(now)
                        .execute(&store.core.pool)
                })
                .await?;
            if done.rows_affected() == 1 {
                let (lease_until, expire_at) = req.deadlines(statement_now(&done)?);
                return Ok(Claim::Acquired(Lease {
                    key: req.key.clone(),
                    request_hash: req.request_hash,
                    fence: record.fence + 1,
                    operation_id,
                    lease_until,
                    expire_at,
                    took_over: false,
                }));
            }
        } else {
            // Expired lease of the same request: the same operation goes on (S23).
            let done = store
                .core
                .send(|| {
                    sqlx::query(statement(store.core.causal, TAKEOVER_SQL, |c| c.takeover))
                        // The readable key in the taker's form, as the other stores write it:
                        // an encrypting handle's takeover leaves nothing of the client key.
                        .bind(req.key.readable())
                        .bind(now)
                        .bind(now)
                        .bind(lease_ms)
                        .bind(now)
                        .bind(lease_ms)
                        .bind(now)
                        .bind(lease_ms)
                        .bind(now)
                        .bind(&req.key.hash()[..])
                        .bind(rev)
                        .bind(now)
                        .bind(now)
                        .bind(&hash)
                        .execute(&store.core.pool)
                })
                .await?;
            if done.rows_affected() == 1 {
                let lease_until = statement_now(&done)? + req.lease;
                return Ok(Claim::Acquired(Lease {
                    key: req.key.clone(),
                    request_hash: req.request_hash,
                    fence: record.fence + 1,
                    operation_id: record.operation_id,
                    lease_until,
                    // The row is the one read (same `rev`): its expiry, stretched as the
                    // statement did.
                    expire_at: record.expire_at.max(lease_until),
                    took_over: true,
                }));
            }
        }
        // Another claim, a completion or a purge changed the row since it was read, or its
        // lease or expiry moved by the database's clock: start over.
    }
    Err(contended(req.key))
}

impl MySqlStore {
    /// The one-statement claim (`docs/storage.md`, "MariaDB / MySQL"); `None` when the store does
    /// not use it, or has just learned that the server does not take it (MySQL).
    async fn claim_returning(
        &self,
        req: &ClaimRequest<'_>,
        hash: &str,
        operation_id: &str,
        now: Option<i64>,
    ) -> Result<Option<Met>, StoreError> {
        if self.returning.get() == Returning::NO {
            return Ok(None);
        }
        let query = || {
            bind_claim(
                sqlx::query(request_path(self.core.causal, now).claim_returning),
                req,
                hash,
                operation_id,
                now,
            )
        };
        let row = self
            .core
            .send(|| async {
                match query().bind_now(now).fetch_one(&self.core.pool).await {
                    Ok(row) => Ok(Some(row)),
                    Err(e) if self.returning.get() == Returning::UNKNOWN && is_syntax_error(&e) => {
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            })
            .await?;
        let Some(row) = row else {
            tracing::debug!(
                target: "idem",
                "the server has no INSERT .. RETURNING (MySQL): claims take two statements on a replay"
            );
            self.returning.set(Returning::NO);
            return Ok(None);
        };
        if self.returning.get() == Returning::UNKNOWN {
            self.returning.set(Returning::YES);
        }
        let stored = read(&row).map_err(classify)?.into_stored()?;
        let row_key: Vec<u8> = row.try_get(CLAIM_RETURNING_KEY_HASH).map_err(classify)?;
        if row_key.as_slice() != req.key.hash().as_slice() {
            // The primary key collided, not `uk_idem_key` (`docs/storage.md`): nothing was inserted,
            // and the row is another key's. Claim again, under a new `UUID_SHORT()`. Told by the
            // key hash, the record's identity, never by the readable key: that one changes form
            // when encryption is switched on (`ScopedKey::opaque`) while older rows keep theirs.
            return Ok(Some(Met::Existing(None)));
        }
        Ok(Some(if stored.record.operation_id == operation_id {
            Met::Inserted {
                lease_until: stored.record.lease_until,
                expire_at: stored.record.expire_at,
            }
        } else {
            Met::Existing(Some(stored))
        }))
    }

    /// The claim as MySQL takes it: the plain `INSERT`, and on a duplicate the `SELECT` of the
    /// row there.
    async fn claim_plain(
        &self,
        req: &ClaimRequest<'_>,
        hash: &str,
        operation_id: &str,
        now: Option<i64>,
    ) -> Result<Met, StoreError> {
        let inserted = self
            .core
            .send(|| async {
                let query = bind_claim(
                    sqlx::query(request_path(self.core.causal, now).insert),
                    req,
                    hash,
                    operation_id,
                    now,
                );
                match query.execute(&self.core.pool).await {
                    Ok(done) => Ok(Some(done)),
                    Err(e) if is_claim_collision(&e) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(match inserted {
            Some(done) => {
                let (lease_until, expire_at) = req.deadlines(statement_now(&done)?);
                Met::Inserted {
                    lease_until,
                    expire_at,
                }
            }
            None => Met::Existing(self.core.select(req.key).await?),
        })
    }
}

/// The "now" a statement computed and handed back through `LAST_INSERT_ID(now)`.
pub(super) fn statement_now(done: &MySqlQueryResult) -> Result<Timestamp, StoreError> {
    match i64::try_from(done.last_insert_id()) {
        Ok(ms) if ms > 0 => Ok(Timestamp::from_millis(ms)),
        _ => Err(StoreError::Config {
            message: "the server did not return the statement's time through LAST_INSERT_ID(): \
                      use MariaDB 10.6+ or MySQL 8.0.13+, without a proxy that rewrites OK \
                      packets"
                .to_owned(),
            source: None,
        }),
    }
}

/// `true` when `err` is a duplicate key (1062) on the claim index `uk_idem_key` or on the
/// primary key, which holds `key_hash` (S15, `docs/storage.md`). The number decides; the index name
/// is read from the end of the message (`.. for key 'uk_idem_key'` on MariaDB,
/// `.. for key 'idem_idempotency_records.uk_idem_key'` on MySQL 8), the only place MySQL
/// reports it.
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

/// What a claim's statement met.
#[allow(
    clippy::large_enum_variant,
    reason = "returned once to the claim loop; boxing would cost every replay an allocation"
)]
enum Met {
    /// No record: the claim inserted its own, with these deadlines.
    Inserted {
        lease_until: Timestamp,
        expire_at: Timestamp,
    },
    /// The record of the key, with the database's "now" (`None`: released or purged between
    /// the `INSERT` and the `SELECT`).
    Existing(Option<Stored>),
}

/// `query` (the claim's `INSERT`) with its binds.
fn bind_claim<'q>(
    query: sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments>,
    req: &'q ClaimRequest<'_>,
    hash: &'q str,
    operation_id: &'q str,
    now: Option<i64>,
) -> sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments> {
    let (lease_ms, ttl_ms) = (millis_param(req.lease), millis_param(req.ttl));
    let remember_ms = req.remember_param();
    query
        .bind(&req.key.hash()[..])
        .bind(req.key.readable())
        .bind(hash)
        .bind(operation_id)
        .bind_now(now)
        .bind_now(now)
        .bind(lease_ms)
        .bind_now(now)
        .bind(lease_ms)
        .bind(ttl_ms.max(remember_ms))
        .bind_now(now)
        .bind_now(now)
        .bind(remember_ms)
        .bind_now(now)
        .bind(lease_ms)
        .bind(ttl_ms)
}

/// A statement the server could not parse (`ER_PARSE_ERROR`): MySQL, given `RETURNING`.
fn is_syntax_error(err: &sqlx::Error) -> bool {
    error_number(err) == Some(ER_PARSE_ERROR)
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
        pool.execute(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (a INT NOT NULL, b INT NOT NULL, PRIMARY KEY (a), UNIQUE KEY uk_other (b))"
        )))
        .await
        .unwrap();
        pool.execute(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} VALUES (1, 1)"
        )))
        .await
        .unwrap();
        let on_primary = pool
            .execute(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {table} VALUES (1, 2)"
            )))
            .await
            .unwrap_err();
        let on_other = pool
            .execute(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {table} VALUES (2, 1)"
            )))
            .await
            .unwrap_err();
        pool.execute(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .await
            .unwrap();
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
