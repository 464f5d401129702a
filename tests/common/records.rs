//! What a store holds, read beside the engine: tests of hostile requests check that nothing was
//! stored, or that a stored record was left untouched, by looking at the store itself.

use std::sync::Arc;

use idem::MemoryStore;
use idem::key::ScopedKey;

/// Direct access to the records of one store under test.
#[derive(Clone)]
pub enum Records {
    Memory(Arc<MemoryStore>),
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
    /// The store's connection and its records' key prefix (`<prefix>rec:`).
    Redis {
        conn: idem::store::redis::RedisConnection,
        records: String,
    },
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
            Records::Redis { .. } => panic!("Records do not count Redis records"),
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
            Records::Redis { .. } => panic!("a Redis record has no row: read its body()"),
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
        if !matches!(self, Records::Memory(_)) {
            self.set(key, "idem_key", Value::Text(idem_key.to_owned()))
                .await;
        }
    }

    /// The stored body of `key` as the store holds it (SQL and Redis stores).
    pub async fn body(&self, key: &ScopedKey) -> Option<Vec<u8>> {
        match self {
            Records::Redis { conn, records } => {
                let mut conn = conn.clone();
                redis::cmd("HGET")
                    .arg(format!("{records}{}", key.hash_hex()))
                    .arg("resp_body")
                    .query_async(&mut conn)
                    .await
                    .unwrap()
            }
            _ => self.row(key).await.and_then(|r| r.resp_body),
        }
    }

    /// Flips one bit of the stored body of `key` at byte `at` (SQL and Redis stores: the
    /// memory store holds nothing at rest), as a tampered backup or a bad disk would.
    pub async fn flip_body_byte(&self, key: &ScopedKey, at: usize) {
        let mut body = self.body(key).await.expect("a stored body");
        body[at] ^= 1;
        self.set(key, "resp_body", Value::Bytes(body)).await;
    }

    /// Overwrites the stored status of `key` (SQL and Redis stores), as a database writer would.
    pub async fn set_status(&self, key: &ScopedKey, status: u16) {
        self.set(key, "resp_status", Value::Int(i64::from(status)))
            .await;
    }

    /// Overwrites the request hash of `key` (hex), as a database writer would.
    pub async fn set_request_hash(&self, key: &ScopedKey, hash: &str) {
        self.set(key, "request_hash", Value::Text(hash.to_owned()))
            .await;
    }

    /// The request hash of `key`'s record (hex; SQL and Redis stores).
    pub async fn request_hash(&self, key: &ScopedKey) -> Option<String> {
        match self {
            Records::Redis { .. } => self
                .field(key, "request_hash")
                .await
                .map(|b| String::from_utf8(b).unwrap()),
            _ => self
                .row(key)
                .await
                .map(|r| r.request_hash.trim().to_owned()),
        }
    }

    /// Adds a header entry to the stored headers of `key` (idem's blob: version 1, a `u32`
    /// count, then length-prefixed names and values), as a database writer would.
    pub async fn append_header(&self, key: &ScopedKey, name: &str, value: &[u8]) {
        let mut blob = match self {
            Records::Redis { .. } => self.field(key, "resp_headers").await,
            Records::Sqlite(pool) => sqlx::query_scalar(
                "SELECT resp_headers FROM idem_idempotency_records WHERE key_hash = ?1",
            )
            .bind(&key.hash()[..])
            .fetch_one(pool)
            .await
            .unwrap(),
            Records::Postgres(pool) => sqlx::query_scalar(
                "SELECT resp_headers FROM idem.idempotency_records WHERE key_hash = $1",
            )
            .bind(&key.hash()[..])
            .fetch_one(pool)
            .await
            .unwrap(),
            Records::MySql(pool) => sqlx::query_scalar(
                "SELECT resp_headers FROM idem_idempotency_records WHERE key_hash = ?",
            )
            .bind(&key.hash()[..])
            .fetch_one(pool)
            .await
            .unwrap(),
            Records::Memory(_) => panic!("the memory store holds nothing at rest to alter"),
        }
        .expect("stored headers");
        let count = u32::from_be_bytes(blob[1..5].try_into().unwrap()) + 1;
        blob[1..5].copy_from_slice(&count.to_be_bytes());
        for part in [name.as_bytes(), value] {
            blob.extend_from_slice(&(part.len() as u32).to_be_bytes());
            blob.extend_from_slice(part);
        }
        self.set(key, "resp_headers", Value::Bytes(blob)).await;
    }

    /// Deletes the record of `key`, if any (SQL and Redis stores).
    pub async fn delete(&self, key: &ScopedKey) {
        let hash = &key.hash()[..];
        match self {
            Records::Memory(_) => panic!("the memory store holds nothing at rest"),
            Records::Sqlite(pool) => {
                sqlx::query("DELETE FROM idem_idempotency_records WHERE key_hash = ?1")
                    .bind(hash)
                    .execute(pool)
                    .await
                    .unwrap();
            }
            Records::Postgres(pool) => {
                sqlx::query("DELETE FROM idem.idempotency_records WHERE key_hash = $1")
                    .bind(hash)
                    .execute(pool)
                    .await
                    .unwrap();
            }
            Records::MySql(pool) => {
                sqlx::query("DELETE FROM idem_idempotency_records WHERE key_hash = ?")
                    .bind(hash)
                    .execute(pool)
                    .await
                    .unwrap();
            }
            Records::Redis { conn, records } => {
                let mut conn = conn.clone();
                let _: i64 = redis::cmd("DEL")
                    .arg(format!("{records}{}", key.hash_hex()))
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
    }

    /// A field of `key`'s Redis hash.
    async fn field(&self, key: &ScopedKey, field: &str) -> Option<Vec<u8>> {
        let Records::Redis { conn, records } = self else {
            panic!("a field of a Redis record");
        };
        let mut conn = conn.clone();
        redis::cmd("HGET")
            .arg(format!("{records}{}", key.hash_hex()))
            .arg(field)
            .query_async(&mut conn)
            .await
            .unwrap()
    }

    /// Writes `value` into `column` of `key`'s record (the field of its hash on Redis).
    async fn set(&self, key: &ScopedKey, column: &str, value: Value) {
        let hash = &key.hash()[..];
        macro_rules! update {
            ($pool:expr, $sql:expr) => {{
                let q = sqlx::query(sqlx::AssertSqlSafe($sql));
                let q = match value {
                    Value::Text(t) => q.bind(t),
                    Value::Bytes(b) => q.bind(b),
                    Value::Int(i) => q.bind(i),
                };
                q.bind(hash).execute($pool).await.unwrap().rows_affected()
            }};
        }
        let updated = match self {
            Records::Memory(_) => panic!("the memory store holds nothing at rest to alter"),
            Records::Sqlite(pool) => update!(
                pool,
                format!("UPDATE idem_idempotency_records SET {column} = ?1 WHERE key_hash = ?2")
            ),
            Records::Postgres(pool) => update!(
                pool,
                format!("UPDATE idem.idempotency_records SET {column} = $1 WHERE key_hash = $2")
            ),
            Records::MySql(pool) => update!(
                pool,
                format!("UPDATE idem_idempotency_records SET {column} = ? WHERE key_hash = ?")
            ),
            Records::Redis { conn, records } => {
                let mut conn = conn.clone();
                let record = format!("{records}{}", key.hash_hex());
                let bytes = match value {
                    Value::Text(t) => t.into_bytes(),
                    Value::Bytes(b) => b,
                    Value::Int(i) => i.to_string().into_bytes(),
                };
                // HSET answers the fields it added: 0 when it overwrote an existing one.
                let exists: bool = redis::cmd("HEXISTS")
                    .arg(&record)
                    .arg(column)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let _: i64 = redis::cmd("HSET")
                    .arg(&record)
                    .arg(column)
                    .arg(bytes)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                u64::from(exists)
            }
        };
        assert_eq!(updated, 1, "no record for {key:?}");
    }
}

/// A value [`Records::set`] writes.
enum Value {
    Text(String),
    Bytes(Vec<u8>),
    Int(i64),
}
