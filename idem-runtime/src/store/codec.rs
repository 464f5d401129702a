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
    /// The database's "now" when the row was read (or the store's clock override), in the
    /// column after `record_columns!()`: every decision about the row is taken against it.
    pub db_now: i64,
}

impl RawRecord {
    /// Reads the `record_columns!()` of `row`, the first at index `first`, and the database's "now"
    /// right after them. `S` and `T` are the integer
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
            db_now: row.try_get(first + 16)?,
        })
    }

    /// Validates the row: known state, 64-hex request hash, well-formed headers.
    pub(crate) fn into_stored(self) -> Result<Stored, StoreError> {
        let (rev, now) = (self.rev, Timestamp::from_millis(self.db_now));
        Ok(Stored {
            record: self.into_record()?,
            rev,
            now,
        })
    }

    fn into_record(self) -> Result<Record, StoreError> {
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

/// A record as read from the database, with what the decisions about it need.
#[derive(Debug)]
pub(crate) struct Stored {
    pub record: Record,
    /// Row version (+1 on every write); the MySQL takeover's compare-and-swap checks it.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub rev: i64,
    /// The database's clock (or the store's override) when the row was read.
    pub now: Timestamp,
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

/// The columns every SQL backend reads, in [`RawRecord`] order (a macro, so that statements
/// can be `concat!`ed at compile time).
macro_rules! record_columns {
    () => {
        "idem_key, request_hash, state, operation_id, fence, rev, \
         resp_status, resp_headers, resp_body, biz_no, locked_at, lease_until, expire_at, \
         created_at, updated_at, completed_at"
    };
}
pub(crate) use record_columns;

/// How many times a claim re-runs when the record changed between its statements (a purge, a
/// concurrent takeover); each retry starts from a fresh read.
pub(crate) const CLAIM_ATTEMPTS: u32 = 8;

/// How many times one statement (or the purge's short transaction) is sent when the database
/// rolled it back as a deadlock victim or a serialization failure.
pub(crate) const STATEMENT_ATTEMPTS: u32 = 4;

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

/// Sends a statement (`send` builds and sends it anew on every call) and counts it. When the
/// database rolled it back as a deadlock victim or serialization failure (`retryable`), it is
/// sent again after a short, jittered backoff, up to [`STATEMENT_ATTEMPTS`] times; the last
/// error is then classified (`Unavailable`). Only statements that run in autocommit (or a
/// transaction of the store's own, retried whole) go through here: a rolled-back statement had
/// no effect, so sending it again is safe. Statements in the caller's transaction
/// (`complete_in`) are never retried, since the database aborted that whole transaction.
pub(crate) async fn send_retrying<T, Fut>(
    statements: &StatementCounter,
    retryable: fn(&sqlx::Error) -> bool,
    classify: fn(sqlx::Error) -> StoreError,
    mut send: impl FnMut() -> Fut,
) -> Result<T, StoreError>
where
    Fut: core::future::Future<Output = Result<T, sqlx::Error>>,
{
    let mut attempt = 1;
    loop {
        statements.add(1);
        match send().await {
            Err(e) if attempt < STATEMENT_ATTEMPTS && retryable(&e) => {
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
            }
            result => return result.map_err(classify),
        }
    }
}

/// The wait before attempt `attempt + 1`: 5 ms, 10 ms, 20 ms, ... each with up to half of it
/// removed at random, so that two transactions that deadlocked do not collide again in step.
fn backoff(attempt: u32) -> core::time::Duration {
    let full = 5u64 << attempt.saturating_sub(1).min(6);
    let mut b = [0u8; 8];
    let random = match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => 0,
    };
    core::time::Duration::from_millis(full - random % (full / 2 + 1))
}

/// The outcome of a `release` / `abandon` / `extend` statement that matched `rows` rows on
/// `key_hash`, `fence`, `operation_id` and state processing: 1 is success, 0 means the lease no
/// longer owns the record (every such statement also bumps `rev`, so a matched row is always a
/// changed row).
pub(crate) fn fenced_unless_one(rows: u64, lease: &Lease) -> Result<(), StoreError> {
    match rows {
        1 => Ok(()),
        0 => Err(fenced_out(lease)),
        n => Err(StoreError::Other(
            format!("{n} rows matched one key hash: is the unique index on `key_hash` missing?")
                .into(),
        )),
    }
}

/// The error of a lease that no longer owns its record.
pub(crate) fn fenced_out(lease: &Lease) -> StoreError {
    StoreError::FencedOut {
        key: lease.key.readable().to_owned(),
        fence: lease.fence,
    }
}

/// Settles a completion whose `UPDATE` matched no row, from the record's `(state, fence,
/// operation_id)` read afterwards: when it is stored (completed or failed-but-stored) under this
/// lease's fence and operation id, an earlier completion of this very lease landed and only its
/// acknowledgement was lost (a dropped connection, a retry by the engine): `Ok`, and the stored
/// snapshot stays as the first completion wrote it. Anything else (taken over, released,
/// replaced, purged) is [`StoreError::FencedOut`].
pub(crate) fn completed_earlier(
    owner: Option<(i64, i64, String)>,
    lease: &Lease,
) -> Result<(), StoreError> {
    match owner {
        Some((state, fence, operation_id))
            if state != RecordState::Processing.code() as i64
                && u64::try_from(fence) == Ok(lease.fence)
                && operation_id == lease.operation_id =>
        {
            Ok(())
        }
        _ => Err(fenced_out(lease)),
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

/// Milliseconds of a duration as a `BIGINT` parameter.
pub(crate) fn millis_param(d: core::time::Duration) -> i64 {
    super::clock::duration_millis(d)
}

/// The inherent methods every SQL store has alike, expanded inside its `impl` block: `connect`
/// (the server databases, whose pools are configured alike; `connect: <pool options type>`),
/// `from_pool` (with the rustdoc given at the call site), `with_clock`, `pool`,
/// `statement_count`, and the private `now_param`, `send` (a statement through
/// [`send_retrying`]) and `select`, which reads the row of a key (`SELECT_SQL`, binding the key
/// hash and the clock override in that order, or the other way round where the module's
/// `SELECT_CLOCK_FIRST` says so).
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
    (pool: $pool:ty, $(#[$from_pool_doc:meta])* fn from_pool;) => {
        $(#[$from_pool_doc])*
        pub fn from_pool(pool: $pool) -> Self {
            Self {
                pool,
                clock: None,
                statements: Arc::default(),
            }
        }

        /// Decides by `clock` instead of the database server's clock: **for tests** (a
        /// [`ManualClock`](crate::store::ManualClock) moves time without sleeping). Every
        /// statement then passes `clock`'s time where it would read the server's. In production
        /// leave it unset: with it, several application instances would need synchronized
        /// clocks, and a lease would have to exceed the handler's run time plus their skew.
        pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
            self.clock = Some(clock);
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

        /// The clock override bound into every statement: `NULL` (the server's clock decides)
        /// unless [`with_clock`](Self::with_clock) set one.
        fn now_param(&self) -> Option<i64> {
            self.clock.as_ref().map(|c| c.now().as_millis())
        }

        /// Sends a statement, retried when it was a deadlock victim (see
        /// `codec::send_retrying`), counted, its error classified.
        async fn send<T, Fut>(&self, send: impl FnMut() -> Fut) -> Result<T, StoreError>
        where
            Fut: core::future::Future<Output = Result<T, sqlx::Error>>,
        {
            $crate::store::codec::send_retrying(&self.statements, retryable, classify, send).await
        }

        /// The row of `key`, expired or not, with the database's "now".
        async fn select(
            &self,
            key: &ScopedKey,
        ) -> Result<Option<$crate::store::codec::Stored>, StoreError> {
            let now = self.now_param();
            let row = self
                .send(|| {
                    let query = sqlx::query(SELECT_SQL);
                    let query = if SELECT_CLOCK_FIRST {
                        query.bind(now).bind(&key.hash()[..])
                    } else {
                        query.bind(&key.hash()[..]).bind(now)
                    };
                    query.fetch_optional(&self.pool)
                })
                .await?;
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
/// its own statements (`RELEASE_SQL`, `ABANDON_SQL`, both binding key hash, fence, operation
/// id and, for `ABANDON_SQL`, the clock override), pool, error classification, `complete_in`,
/// `claim_impl`, `purge_impl` and `migrate_on`, all resolved in the module that expands it.
/// `extend` and `get` come from `returning_store_methods` or stay in the module.
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
            Box::pin(self.complete_impl(lease, completion))
        }

        fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let fence = fence_param(lease.fence)?;
                // Deletes the record of an attempt declared effect-free (nothing was saved,
                // S2): only the lease that owns it (same fence and operation id, still
                // processing) can, so a record taken over, completed or replaced is never
                // deleted by a stale lease. No expiry condition: a record nobody superseded
                // is still this lease's, expired or not.
                let done = self
                    .send(|| {
                        sqlx::query(RELEASE_SQL)
                            .bind(&lease.key.hash()[..])
                            .bind(fence)
                            .bind(&lease.operation_id)
                            .execute(&self.pool)
                    })
                    .await?;
                fenced_unless_one(done.rows_affected(), lease)
            })
        }

        fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let fence = fence_param(lease.fence)?;
                let now = self.now_param();
                let done = self
                    .send(|| {
                        sqlx::query(ABANDON_SQL)
                            .bind(&lease.key.hash()[..])
                            .bind(fence)
                            .bind(&lease.operation_id)
                            .bind(now)
                            .execute(&self.pool)
                    })
                    .await?;
                fenced_unless_one(done.rows_affected(), lease)
            })
        }

        fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
            Box::pin(self.purge_impl(batch))
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
            match &self.clock {
                Some(clock) => &**clock,
                None => &SystemClock,
            }
        }
    };
}
pub(crate) use same_sql_store_methods;

/// The [`Store`](super::Store) methods that PostgreSQL and SQLite implement with the same code:
/// `extend` reads the renewed lease back with `RETURNING lease_until, expire_at` (`EXTEND_SQL`,
/// binding key hash, fence, operation id, the lease's length in ms and the clock override), and
/// `get` filters what `select` reads by the database's "now". MySQL has no `RETURNING`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! returning_store_methods {
    () => {
        fn extend<'a>(
            &'a self,
            lease: &'a Lease,
            by: Duration,
        ) -> BoxFuture<'a, Result<Lease, StoreError>> {
            Box::pin(async move {
                let fence = fence_param(lease.fence)?;
                let now = self.now_param();
                let row = self
                    .send(|| {
                        sqlx::query(EXTEND_SQL)
                            .bind(&lease.key.hash()[..])
                            .bind(fence)
                            .bind(&lease.operation_id)
                            .bind(millis_param(by))
                            .bind(now)
                            .fetch_optional(&self.pool)
                    })
                    .await?;
                let Some(row) = row else {
                    return Err(fenced_out(lease));
                };
                let lease_until: i64 = row.try_get(0).map_err(classify)?;
                let expire_at: i64 = row.try_get(1).map_err(classify)?;
                Ok(Lease {
                    lease_until: Timestamp::from_millis(lease_until),
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
                Ok(self
                    .select(key)
                    .await?
                    .filter(|s| !s.record.is_expired(s.now))
                    .map(|s| s.record))
            })
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use returning_store_methods;
