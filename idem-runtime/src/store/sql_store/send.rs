//! Sending statements: every statement a store sends is counted, and one that the database
//! rolled back as a deadlock victim or serialization failure is sent again.

use core::future::Future;
use core::time::Duration;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::error::StoreError;

/// How many times one statement (or the purge's short transaction) is sent when the database
/// rolled it back as a deadlock victim or a serialization failure.
pub(crate) const STATEMENT_ATTEMPTS: u32 = 4;

/// Counts the SQL statements a store sent (diagnostics; the tests check the documented counts).
#[derive(Debug, Default)]
pub(crate) struct StatementCounter(AtomicU64);

impl StatementCounter {
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Begins a transaction on `pool` — [`Pool::begin`](sqlx::Pool::begin) that may be given up on.
///
/// sqlx 0.9's `Pool::begin` is not cancel-safe on PostgreSQL and MySQL/MariaDB
/// (transact-rs/sqlx#4393): dropped after its `BEGIN` left for the server but before the answer
/// was read — a timeout, a `select!`, a client that hung up — it puts the connection back in the
/// pool **inside a transaction that nothing ends**. Every later statement sent on that
/// connection runs in it and never commits. On a pool shared with a store that includes idem's
/// claims and completions: a claim nobody else sees lets a retry claim the key again, under
/// another operation id, and the handler runs twice.
///
/// Here the `BEGIN` runs in a task of its own: a caller that gives up drops only the task's
/// handle, the task reads the answer, and the transaction nobody takes any more is dropped there
/// with its `ROLLBACK` queued, as sqlx does for any open transaction. idem begins its own
/// transactions (the atomic mode's, MariaDB's purge batches) this way; so should a handler that
/// begins one on the store's pool and can be cancelled. Without a tokio runtime there is no timer
/// to give up on it, and the `BEGIN` runs inline.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_runtime::store::sqlite::SqliteStore;
/// use idem_runtime::store::begin_cancel_safe;
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::open(dir.path().join("app.db")).await?;
/// let mut tx = begin_cancel_safe(store.pool()).await?;
/// sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY)")
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// # #[cfg(not(feature = "sqlite"))]
/// # fn main() {}
/// ```
///
/// # Errors
/// What `Pool::begin` returns: the pool timed out, the connection failed, the server refused.
pub async fn begin_cancel_safe<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
) -> Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
    begin_cancel_safe_with(pool, None).await
}

/// [`begin_cancel_safe`] with `statement` instead of the driver's `BEGIN`, if given.
pub(crate) async fn begin_cancel_safe_with<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    statement: Option<&'static str>,
) -> Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
    let begin = |pool: sqlx::Pool<DB>| async move {
        match statement {
            Some(statement) => pool.begin_with(statement).await,
            None => pool.begin().await,
        }
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return begin(pool.clone()).await;
    }
    match tokio::spawn(begin(pool.clone())).await {
        Ok(begun) => begun,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down.
        Err(e) => Err(sqlx::Error::Io(std::io::Error::other(e))),
    }
}

/// How long a pooled connection may have sat idle and still be used without a `ping` first.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const TRUSTED_IDLE: Duration = Duration::from_millis(500);

/// `options` with sqlx's check before every acquire (`test_before_acquire`: a `ping`, one more
/// round trip per statement) kept only for connections idle for [`TRUSTED_IDLE`] or longer,
/// HikariCP's rule (its `aliveBypassWindowMs`, 500 ms by default). A connection used that
/// recently is in use under load, where a round trip per statement costs most; one the server
/// ended while it sat idle (a restart, a failover, an idle timeout) has sat there longer, and is
/// still checked and replaced before a statement meets it. sqlx also pings every connection it
/// takes back, which catches one broken during its statement.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn ping_when_idle<DB: sqlx::Database>(
    options: sqlx::pool::PoolOptions<DB>,
) -> sqlx::pool::PoolOptions<DB> {
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= TRUSTED_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// Connects `pool_options`' pool after one connection opened directly, whose error comes back
/// at once: the pool retries a refused connection until its acquire timeout and then reports
/// only `PoolTimedOut`, without the cause (a server that is not running, a wrong port). A
/// server that answers "starting up" is left to the pool's retries.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn connect_pool<DB: sqlx::Database>(
    pool_options: sqlx::pool::PoolOptions<DB>,
    options: <DB::Connection as sqlx::Connection>::Options,
) -> Result<sqlx::Pool<DB>, sqlx::Error> {
    use sqlx::ConnectOptions;
    let wait = pool_options.get_acquire_timeout();
    match tokio::time::timeout(wait, options.connect()).await {
        Err(_) => return Err(sqlx::Error::PoolTimedOut),
        // Only its opening mattered: a failed goodbye is not a failed start.
        Ok(Ok(first)) => {
            let _ = sqlx::Connection::close(first).await;
        }
        Ok(Err(sqlx::Error::Database(e))) if e.is_transient_in_connect_phase() => {}
        Ok(Err(e)) => return Err(e),
    }
    pool_options.connect_with(options).await
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
    Fut: Future<Output = Result<T, sqlx::Error>>,
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
fn backoff(attempt: u32) -> Duration {
    let full = 5u64 << attempt.saturating_sub(1).min(6);
    let mut b = [0u8; 8];
    let random = match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => 0,
    };
    Duration::from_millis(full - random % (full / 2 + 1))
}
