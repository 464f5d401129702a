//! Column encodings and helpers shared by the SQL backends: response headers as one length-prefixed blob,
//! and the checked conversion of a raw row into a [`Record`].

use sqlx::{ColumnIndex, Decode, Row, Type};

use super::{Lease, Record, RecordState, StoreError, Timestamp};
use crate::fingerprint::RequestHash;

/// Version byte of the header blob.
const HEADERS_V1: u8 = 1;

/// Encodes headers as `1, count: u32, (name_len: u32, name, value_len: u32, value)*` (big
/// endian), so that names and values may contain any byte.
pub(crate) fn encode_headers(headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    let len = 5 + headers
        .iter()
        .map(|(n, v)| 8 + n.len() + v.len())
        .sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.push(HEADERS_V1);
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (name, value) in headers {
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// Decodes [`encode_headers`]' output; `None` for anything malformed.
pub(crate) fn decode_headers(mut b: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Some(head)
    }
    fn take_u32(b: &mut &[u8]) -> Option<usize> {
        let bytes: [u8; 4] = take(b, 4)?.try_into().ok()?;
        Some(u32::from_be_bytes(bytes) as usize)
    }
    if take(&mut b, 1)? != [HEADERS_V1] {
        return None;
    }
    let count = take_u32(&mut b)?;
    let mut out = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let n = take_u32(&mut b)?;
        let name = core::str::from_utf8(take(&mut b, n)?).ok()?.to_owned();
        let n = take_u32(&mut b)?;
        out.push((name, take(&mut b, n)?.to_vec()));
    }
    b.is_empty().then_some(out)
}

/// A row as the SQL backends read it, before validation.
pub(crate) struct RawRecord {
    pub idem_key: String,
    pub request_hash: String,
    pub state: i64,
    pub operation_id: String,
    pub fence: i64,
    /// Row version (+1 on every write); only the MySQL claim reads it (compare-and-swap).
    #[allow(dead_code)]
    pub rev: i64,
    pub resp_status: Option<i64>,
    pub resp_headers: Option<Vec<u8>>,
    pub resp_body: Option<Vec<u8>>,
    pub biz_no: Option<String>,
    pub locked_at: i64,
    pub lease_until: i64,
    pub expire_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
}

impl RawRecord {
    /// Reads the [`COLUMNS`] of `row`, the first at index `first`. `S` and `T` are the integer
    /// types the backend's columns `state` and `resp_status` decode to.
    pub(crate) fn read<'r, R, S, T>(row: &'r R, first: usize) -> Result<Self, sqlx::Error>
    where
        R: Row,
        usize: ColumnIndex<R>,
        S: Into<i64> + Decode<'r, R::Database> + Type<R::Database>,
        T: Into<i64> + Decode<'r, R::Database> + Type<R::Database>,
        i64: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(RawRecord {
            idem_key: row.try_get(first)?,
            request_hash: row.try_get(first + 1)?,
            state: row.try_get::<S, _>(first + 2)?.into(),
            operation_id: row.try_get(first + 3)?,
            fence: row.try_get(first + 4)?,
            rev: row.try_get(first + 5)?,
            resp_status: row.try_get::<Option<T>, _>(first + 6)?.map(Into::into),
            resp_headers: row.try_get(first + 7)?,
            resp_body: row.try_get(first + 8)?,
            biz_no: row.try_get(first + 9)?,
            locked_at: row.try_get(first + 10)?,
            lease_until: row.try_get(first + 11)?,
            expire_at: row.try_get(first + 12)?,
            created_at: row.try_get(first + 13)?,
            updated_at: row.try_get(first + 14)?,
            completed_at: row.try_get(first + 15)?,
        })
    }

    /// Validates the row: known state, 64-hex request hash, well-formed headers.
    pub(crate) fn into_record(self) -> Result<Record, StoreError> {
        let key = self.idem_key;
        let bad = |detail: String| StoreError::corrupt(key.clone(), detail);
        let state = RecordState::from_code(self.state)
            .ok_or_else(|| bad(format!("unknown state {}", self.state)))?;
        let request_hash: RequestHash = self
            .request_hash
            .trim_end()
            .parse()
            .map_err(|e| bad(format!("request_hash: {e}")))?;
        let fence = u64::try_from(self.fence).map_err(|_| bad(format!("fence {}", self.fence)))?;
        let status = match self.resp_status {
            None => None,
            Some(s) => Some(
                u16::try_from(s)
                    .ok()
                    .filter(|s| (100..=999).contains(s))
                    .ok_or_else(|| bad(format!("response status {s}")))?,
            ),
        };
        let headers = match self.resp_headers {
            None => Vec::new(),
            Some(h) => decode_headers(&h).ok_or_else(|| bad("malformed headers".to_owned()))?,
        };
        if state != RecordState::Processing && status.is_none() {
            return Err(bad(format!("{state:?} without a response status")));
        }
        Ok(Record {
            key,
            request_hash,
            state,
            operation_id: self.operation_id,
            fence,
            status,
            headers,
            body: self.resp_body.unwrap_or_default(),
            biz_no: self.biz_no,
            locked_at: Timestamp::from_millis(self.locked_at),
            lease_until: Timestamp::from_millis(self.lease_until),
            expire_at: Timestamp::from_millis(self.expire_at),
            created_at: Timestamp::from_millis(self.created_at),
            updated_at: Timestamp::from_millis(self.updated_at),
            completed_at: self.completed_at.map(Timestamp::from_millis),
        })
    }
}

/// Fence as the `BIGINT` column stores it.
pub(crate) fn fence_param(fence: u64) -> Result<i64, StoreError> {
    i64::try_from(fence).map_err(|_| StoreError::Invalid(format!("fence {fence} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = vec![
            ("content-type".to_owned(), b"application/json".to_vec()),
            ("x-empty".to_owned(), Vec::new()),
            ("x-bin".to_owned(), vec![0, 255, 10]),
        ];
        assert_eq!(decode_headers(&encode_headers(&h)), Some(h));
        assert_eq!(decode_headers(&encode_headers(&[])), Some(vec![]));
        let mut bad = encode_headers(&[("a".to_owned(), b"b".to_vec())]);
        bad.push(0);
        assert_eq!(decode_headers(&bad), None);
        assert_eq!(decode_headers(&[]), None);
        assert_eq!(decode_headers(&[1, 0, 0, 0, 1]), None);
    }
}

/// The columns every SQL backend reads, in [`RawRecord`] order.
pub(crate) const COLUMNS: &str = "idem_key, request_hash, state, operation_id, fence, rev, \
    resp_status, resp_headers, resp_body, biz_no, locked_at, lease_until, expire_at, \
    created_at, updated_at, completed_at";

/// How many times a claim re-runs when the record changed between its statements (a purge, a
/// concurrent takeover); each retry starts from a fresh read.
pub(crate) const CLAIM_ATTEMPTS: u32 = 8;

/// Counts the SQL statements a store sent (diagnostics; the tests check the documented counts).
#[derive(Debug, Default)]
pub(crate) struct StatementCounter(std::sync::atomic::AtomicU64);

impl StatementCounter {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The outcome of a `complete` / `release` / `extend` statement that matched `rows` rows on
/// `key_hash`, `fence` and `operation_id`: 1 is success, 0 means the lease no longer owns the
/// record (every such statement also bumps `rev`, so a matched row is always a changed row).
pub(crate) fn fenced_unless_one(rows: u64, lease: &Lease) -> Result<(), StoreError> {
    match rows {
        1 => Ok(()),
        0 => Err(StoreError::FencedOut {
            key: lease.key.readable().to_owned(),
            fence: lease.fence,
        }),
        n => Err(StoreError::Other(
            format!("{n} rows matched one key hash: is the unique index on `key_hash` missing?")
                .into(),
        )),
    }
}

/// The error of a claim that kept finding its record changed under it.
pub(crate) fn contended(key: &str) -> StoreError {
    StoreError::Unavailable {
        source: format!(
            "the record of `{key}` changed under {CLAIM_ATTEMPTS} claim attempts in a row"
        )
        .into(),
        retry_after: core::time::Duration::from_millis(100),
    }
}

/// The inherent methods every SQL store has alike, expanded inside its `impl` block: `connect`
/// (the server databases, whose pools are configured alike; `connect: <pool options type>`),
/// `from_pool` (with the rustdoc given at the call site), `with_clock`, `pool`,
/// `statement_count`, and the private `select`, which reads the row of a key as the module's
/// `decode` returns it (`decoded: <its type>`).
macro_rules! sql_store_inherent_methods {
    (pool: $pool:ty, connect: $options:ty, $($rest:tt)*) => {
        /// Connects a pool of up to 10 connections to `url`; acquiring a connection gives up after
        /// 5 s ([`StoreError::Unavailable`]).
        ///
        /// # Errors
        /// [`StoreError::Config`] for a malformed URL; [`StoreError::Unavailable`] when the server
        /// cannot be reached.
        pub async fn connect(url: &str) -> Result<Self, StoreError> {
            let pool = <$options>::new()
                .max_connections(10)
                .acquire_timeout(Duration::from_secs(5))
                .connect(url)
                .await
                .map_err(classify)?;
            Ok(Self::from_pool(pool))
        }

        $crate::store::codec::sql_store_inherent_methods!(pool: $pool, $($rest)*);
    };
    (pool: $pool:ty, decoded: $decoded:ty, $(#[$from_pool_doc:meta])* fn from_pool;) => {
        $(#[$from_pool_doc])*
        pub fn from_pool(pool: $pool) -> Self {
            Self {
                pool,
                clock: Arc::new(SystemClock),
                statements: Arc::default(),
            }
        }

        /// Reads `clock` instead of the system clock.
        pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
            self.clock = clock;
            self
        }

        /// The pool.
        pub fn pool(&self) -> &$pool {
            &self.pool
        }

        /// SQL statements sent so far by this store (and its clones); diagnostics.
        pub fn statement_count(&self) -> u64 {
            self.statements.get()
        }

        /// The row of `key`, expired or not.
        async fn select(&self, key: &ScopedKey) -> Result<Option<$decoded>, StoreError> {
            self.statements.add(1);
            let row = sqlx::query(&SELECT_SQL)
                .bind(&key.hash()[..])
                .fetch_optional(&self.pool)
                .await
                .map_err(classify)?;
            row.map(|r| decode(&r)).transpose()
        }
    };
}
pub(crate) use sql_store_inherent_methods;

/// Reads idem's migration history from `$table` on `$conn`, in an `async` function returning
/// `Result<_, StoreError>`.
macro_rules! applied_migrations {
    ($conn:expr, $table:literal) => {
        sqlx::query(concat!("SELECT version, checksum, success FROM ", $table))
            .fetch_all($conn)
            .await
            .map_err(|e| migrate_error(concat!("cannot read ", $table), e))?
            .into_iter()
            .map(|r| Applied {
                version: r.get(0),
                checksum: r.get(1),
                success: r.get(2),
            })
            .collect::<Vec<Applied>>()
    };
}
pub(crate) use applied_migrations;

/// The [`Store`](super::Store) methods that every SQL store implements with the same code over
/// its own statements (`RELEASE_SQL`, `PURGE_SQL`), pool, error classification, `complete_in`,
/// `claim_impl` and `migrate_on`, all resolved in the module that expands it. `extend` and
/// `get` come from `returning_store_methods` or stay in the module.
macro_rules! same_sql_store_methods {
    () => {
        fn claim<'a>(
            &'a self,
            req: &'a ClaimRequest<'a>,
        ) -> BoxFuture<'a, Result<Claim, StoreError>> {
            Box::pin(self.claim_impl(req))
        }

        fn complete<'a>(
            &'a self,
            lease: &'a Lease,
            completion: &'a Completion,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let mut conn = self.pool.acquire().await.map_err(classify)?;
                self.complete_in(&mut conn, lease, completion).await
            })
        }

        fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                self.statements.add(1);
                let done = sqlx::query(RELEASE_SQL)
                    .bind(&lease.key.hash()[..])
                    .bind(fence_param(lease.fence)?)
                    .bind(self.clock.now().as_millis())
                    .bind(&lease.operation_id)
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                fenced_unless_one(done.rows_affected(), lease)
            })
        }

        fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                self.statements.add(1);
                let done = sqlx::query(ABANDON_SQL)
                    .bind(&lease.key.hash()[..])
                    .bind(fence_param(lease.fence)?)
                    .bind(self.clock.now().as_millis())
                    .bind(&lease.operation_id)
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                fenced_unless_one(done.rows_affected(), lease)
            })
        }

        fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
            Box::pin(async move {
                self.statements.add(1);
                let done = sqlx::query(PURGE_SQL)
                    .bind(self.clock.now().as_millis())
                    .bind(i64::from(batch))
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                Ok(done.rows_affected())
            })
        }

        fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(async move {
                // A connection of its own, out of the pool, closed afterwards: the lock with
                // which `migrate_on` serializes concurrent migrations belongs to the connection.
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err(|e| migrate_error("cannot connect", e))?
                    .detach();
                let result = migrate_on(&mut conn).await;
                let _ = conn.close().await;
                result
            })
        }

        fn clock(&self) -> &dyn Clock {
            &*self.clock
        }
    };
}
pub(crate) use same_sql_store_methods;

/// The [`Store`](super::Store) methods that PostgreSQL and SQLite implement with the same code:
/// `extend` reads the record's new expiry back with `RETURNING` (`EXTEND_SQL`), and `get` filters
/// what `select` reads. MySQL has no `RETURNING`, and its `select` also returns the `rev`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! returning_store_methods {
    () => {
        fn extend<'a>(
            &'a self,
            lease: &'a Lease,
            by: Duration,
        ) -> BoxFuture<'a, Result<Lease, StoreError>> {
            Box::pin(async move {
                let now = self.clock.now();
                let lease_until = now + by;
                self.statements.add(1);
                let row = sqlx::query(EXTEND_SQL)
                    .bind(&lease.key.hash()[..])
                    .bind(fence_param(lease.fence)?)
                    .bind(lease_until.as_millis())
                    .bind(now.as_millis())
                    .bind(&lease.operation_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)?;
                let Some(row) = row else {
                    return Err(StoreError::FencedOut {
                        key: lease.key.readable().to_owned(),
                        fence: lease.fence,
                    });
                };
                let expire_at: i64 = row.try_get(0).map_err(classify)?;
                Ok(Lease {
                    lease_until,
                    expire_at: Timestamp::from_millis(expire_at),
                    ..lease.clone()
                })
            })
        }

        fn get<'a>(
            &'a self,
            key: &'a ScopedKey,
        ) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
            Box::pin(async move {
                let now = self.clock.now();
                Ok(self.select(key).await?.filter(|r| !r.is_expired(now)))
            })
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use returning_store_methods;
