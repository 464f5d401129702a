//! What a store holds, read beside the engine: tests of hostile requests check that nothing was
//! stored, or that a stored record was left untouched, by looking at the store itself.

use std::sync::Arc;

use idem::key::ScopedKey;
use idem::store::MemoryStore;

/// Direct access to the records of one store under test.
#[derive(Clone)]
pub enum Records {
    Memory(Arc<MemoryStore>),
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
}

/// A record as its table row holds it (SQL stores).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key_hash: Vec<u8>,
    pub idem_key: String,
    pub request_hash: String,
    pub biz_no: Option<String>,
    pub resp_body: Option<Vec<u8>>,
}

impl Records {
    /// How many records hold `marker` in their readable key (`idem_key`). The memory store has
    /// no readable index: every record it holds counts (each test gets a store of its own).
    pub async fn containing(&self, marker: &str) -> i64 {
        match self {
            Records::Memory(store) => store.len() as i64,
            Records::Sqlite(pool) => sqlx::query_scalar(
                "SELECT count(*) FROM idem_idempotency_records WHERE instr(idem_key, ?1) > 0",
            )
            .bind(marker)
            .fetch_one(pool)
            .await
            .unwrap(),
            Records::Postgres(pool) => sqlx::query_scalar(
                "SELECT count(*) FROM idem.idempotency_records WHERE strpos(idem_key, $1) > 0",
            )
            .bind(marker)
            .fetch_one(pool)
            .await
            .unwrap(),
            Records::MySql(pool) => sqlx::query_scalar(
                "SELECT count(*) FROM idem_idempotency_records WHERE LOCATE(?, idem_key) > 0",
            )
            .bind(marker)
            .fetch_one(pool)
            .await
            .unwrap(),
        }
    }

    /// The table row of `key` (`None` for the memory store, which has no table).
    pub async fn row(&self, key: &ScopedKey) -> Option<Row> {
        type Tuple = (Vec<u8>, String, String, Option<String>, Option<Vec<u8>>);
        let columns = "key_hash, idem_key, request_hash, biz_no, resp_body";
        let hash = &key.hash()[..];
        let tuple: Option<Tuple> = match self {
            Records::Memory(_) => return None,
            Records::Sqlite(pool) => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {columns} FROM idem_idempotency_records WHERE key_hash = ?1"
            )))
            .bind(hash)
            .fetch_optional(pool)
            .await
            .unwrap(),
            Records::Postgres(pool) => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {columns} FROM idem.idempotency_records WHERE key_hash = $1"
            )))
            .bind(hash)
            .fetch_optional(pool)
            .await
            .unwrap(),
            Records::MySql(pool) => sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {columns} FROM idem_idempotency_records WHERE key_hash = ?"
            )))
            .bind(hash)
            .fetch_optional(pool)
            .await
            .unwrap(),
        };
        tuple.map(
            |(key_hash, idem_key, request_hash, biz_no, resp_body)| Row {
                key_hash,
                idem_key,
                request_hash,
                biz_no,
                resp_body,
            },
        )
    }

    /// Overwrites the readable key of `key`'s row (SQL stores; a no-op for the memory store).
    pub async fn set_idem_key(&self, key: &ScopedKey, idem_key: &str) {
        let hash = &key.hash()[..];
        let updated = match self {
            Records::Memory(_) => return,
            Records::Sqlite(pool) => {
                sqlx::query("UPDATE idem_idempotency_records SET idem_key = ?1 WHERE key_hash = ?2")
                    .bind(idem_key)
                    .bind(hash)
                    .execute(pool)
                    .await
                    .unwrap()
                    .rows_affected()
            }
            Records::Postgres(pool) => {
                sqlx::query("UPDATE idem.idempotency_records SET idem_key = $1 WHERE key_hash = $2")
                    .bind(idem_key)
                    .bind(hash)
                    .execute(pool)
                    .await
                    .unwrap()
                    .rows_affected()
            }
            Records::MySql(pool) => {
                sqlx::query("UPDATE idem_idempotency_records SET idem_key = ? WHERE key_hash = ?")
                    .bind(idem_key)
                    .bind(hash)
                    .execute(pool)
                    .await
                    .unwrap()
                    .rows_affected()
            }
        };
        assert_eq!(updated, 1, "no row for {key:?}");
    }

    /// Flips one bit of the stored body of `key`'s row at byte `at` (SQL stores; the memory
    /// store has no table), as a tampered backup or a bad disk would.
    pub async fn flip_body_byte(&self, key: &ScopedKey, at: usize) {
        let mut body = self
            .row(key)
            .await
            .and_then(|r| r.resp_body)
            .expect("a stored body");
        body[at] ^= 1;
        let hash = &key.hash()[..];
        let updated = match self {
            Records::Memory(_) => panic!("the memory store has no table to alter"),
            Records::Sqlite(pool) => sqlx::query(
                "UPDATE idem_idempotency_records SET resp_body = ?1 WHERE key_hash = ?2",
            )
            .bind(body)
            .bind(hash)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected(),
            Records::Postgres(pool) => sqlx::query(
                "UPDATE idem.idempotency_records SET resp_body = $1 WHERE key_hash = $2",
            )
            .bind(body)
            .bind(hash)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected(),
            Records::MySql(pool) => {
                sqlx::query("UPDATE idem_idempotency_records SET resp_body = ? WHERE key_hash = ?")
                    .bind(body)
                    .bind(hash)
                    .execute(pool)
                    .await
                    .unwrap()
                    .rows_affected()
            }
        };
        assert_eq!(updated, 1, "no row for {key:?}");
    }
}
