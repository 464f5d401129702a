//! [`StoreError`]: what can go wrong in a store, split into "try again later" and everything
//! else. A message says what happened and what to do; the driver's error is only its
//! [`source`](std::error::Error::source), printed by the reporter (or [`Chain`]).

use core::fmt;
use core::time::Duration;

/// The error type of a boxed source error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How long a client is told to wait (`Retry-After`) when the store is unavailable.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// An error of a [`Store`](super::interface::Store) operation.
///
/// Only [`StoreError::Unavailable`] is transient ([`StoreError::is_transient`]): the HTTP layer
/// answers it with `503 Service Unavailable` + `Retry-After`. [`StoreError::FencedOut`] is the
/// normal fate of a zombie holder (S23). The others are configuration mistakes, broken rows or
/// bugs. A failed claim never leaves a half-written record behind: every claim is one atomic
/// statement (or a compare-and-swap), committed at once (S18).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database cannot be reached or refused the work for now: connection refused or reset,
    /// pool timeout, deadlock, serialization failure, lock wait timeout, `SQLITE_BUSY`. Retrying
    /// later may succeed.
    #[error("the idempotency store is unavailable for now: retry after {retry_after:?}")]
    Unavailable {
        /// What the driver reported.
        #[source]
        source: BoxError,
        /// A suggested wait before retrying.
        retry_after: Duration,
    },
    /// The lease no longer owns the record: another claim took the record over with a higher
    /// fencing token, the record was released, or it expired. Its result must not be stored (and
    /// was not).
    #[error(
        "the lease on the idempotency record with key hash {key_hash} (fence {fence}) was fenced out: the record was taken over, released or expired, so this result is not stored"
    )]
    FencedOut {
        /// The key's hash in hex ([`ScopedKey::hash_hex`](crate::key::ScopedKey::hash_hex), the
        /// `key_hash` column): errors are logged, and a client key or a tenant id is personal
        /// data in many deployments.
        key_hash: String,
        /// The fencing token of the stale lease.
        fence: u64,
    },
    /// A request the store cannot honour as written (zero lease, status out of range, ...).
    #[error("invalid store request: {0}")]
    Invalid(String),
    /// A result larger than the store can ever keep (MariaDB/MySQL's `max_allowed_packet`,
    /// PostgreSQL's and SQLite's 1 GB per value, Redis's 512 MiB bulk string), refused before it
    /// is sent: the same completion would fail the same way on every try.
    #[error(
        "a result of {bytes} bytes is over the {limit} bytes this store can keep: make the response smaller, give it a business number so that a truncated snapshot is stored (`max_snapshot_bytes`), or raise the store's limit"
    )]
    TooLarge {
        /// The completion's size: body, headers and business number.
        bytes: u64,
        /// The store's limit.
        limit: u64,
    },
    /// A stored row that does not decode (an unknown state, a bad hash, malformed headers).
    /// It names the record by its key hash, never by its readable key: errors reach logs, and
    /// the readable key holds tenant and user ids and the client's key.
    #[error("corrupt idempotency record{}: {detail}", key_hash.as_deref().map(|h| format!(" with key hash {h}")).unwrap_or_default())]
    Corrupt {
        /// The key hash in hex (the `key_hash` column), when the failing call knew it.
        key_hash: Option<String>,
        /// What is wrong with it.
        detail: String,
    },
    /// The store is set up wrongly, e.g. its table does not exist: run
    /// [`Store::migrate`](super::interface::Store::migrate).
    #[error("idempotency store misconfigured: {message}")]
    Config {
        /// What to fix.
        message: String,
        /// The driver's error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Applying the store's migrations failed.
    #[error("idempotency store migration failed: {message}")]
    Migrate {
        /// What failed.
        message: String,
        /// The driver's error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Anything else: a bug in idem or an unexpected database error.
    #[error(
        "the idempotency store failed unexpectedly: if its cause is not the database's, report it as a bug in idem"
    )]
    Other(#[source] BoxError),
}

impl StoreError {
    /// `true` for [`StoreError::Unavailable`]: answer 503 + `Retry-After`, the request may be
    /// retried unchanged.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// The suggested wait of a transient error.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            StoreError::Unavailable { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// A [`StoreError::Unavailable`] with the default wait.
    pub fn unavailable(source: impl Into<BoxError>) -> Self {
        StoreError::Unavailable {
            source: source.into(),
            retry_after: DEFAULT_RETRY_AFTER,
        }
    }

    /// A [`StoreError::Corrupt`] that names no record yet names `key`'s (by its hash); any
    /// other error comes back as it is. For the stores' calls that know the key, around rows
    /// decoded without it.
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    pub(crate) fn of_record(self, key: &crate::key::ScopedKey) -> Self {
        match self {
            StoreError::Corrupt {
                key_hash: None,
                detail,
            } => StoreError::Corrupt {
                key_hash: Some(key.hash_hex().to_string()),
                detail,
            },
            other => other,
        }
    }

    /// A [`StoreError::Corrupt`] of the record of `key`, if known.
    #[cfg(any(
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite",
        feature = "redis"
    ))]
    pub(crate) fn corrupt(key: Option<&crate::key::ScopedKey>, detail: impl Into<String>) -> Self {
        StoreError::Corrupt {
            key_hash: key.map(|k| k.hash_hex().to_string()),
            detail: detail.into(),
        }
    }
}

/// An error and its causes on one line, `error: cause: cause's cause`, for log lines and problem
/// details: a message never repeats its cause, so whoever prints only `Display` loses it. A
/// cause that its error's message already ends with (drivers' errors often repeat theirs:
/// sqlx's `error returned from database: {0}`) is not written twice.
///
/// ```
/// use idem_runtime::store::{Chain, StoreError};
/// let refused = std::io::Error::other("connection refused");
/// let e = StoreError::unavailable(refused);
/// assert_eq!(
///     Chain(&e).to_string(),
///     "the idempotency store is unavailable for now: retry after 1s: connection refused"
/// );
/// ```
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = self.0.to_string();
        f.write_str(&text)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            let next = cause.to_string();
            if !text.ends_with(&next) {
                write!(f, ": {next}")?;
            }
            text = next;
            source = cause.source();
        }
        Ok(())
    }
}

/// `true` when `e` is PostgreSQL's "current transaction is aborted" (SQLSTATE 25P02): a statement
/// sent in a transaction that an earlier statement's error aborted. Nothing of that transaction
/// can commit any more.
pub(crate) fn is_aborted_transaction(e: &StoreError) -> bool {
    #[cfg(feature = "postgres")]
    if let StoreError::Other(source) = e {
        return source
            .downcast_ref::<sqlx::Error>()
            .and_then(|e| e.as_database_error())
            .and_then(|db| db.code())
            .is_some_and(|code| code == "25P02");
    }
    let _ = e;
    false
}

/// Maps an sqlx error: transport trouble and the given transient database codes become
/// [`StoreError::Unavailable`], a missing table [`StoreError::Config`], decode failures
/// [`StoreError::Corrupt`], the rest [`StoreError::Other`].
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub(crate) fn classify_sqlx(
    err: sqlx::Error,
    transient: fn(&dyn sqlx::error::DatabaseError) -> bool,
    missing_table: fn(&dyn sqlx::error::DatabaseError) -> bool,
) -> StoreError {
    use sqlx::Error as E;
    match err {
        E::Io(_)
        | E::PoolTimedOut
        | E::PoolClosed
        | E::WorkerCrashed
        | E::Tls(_)
        | E::Protocol(_) => StoreError::unavailable(err),
        E::Database(ref db) if transient(db.as_ref()) => StoreError::unavailable(err),
        E::Database(ref db) if missing_table(db.as_ref()) => StoreError::Config {
            message: "the idempotency table does not exist: run `Store::migrate()` first"
                .to_owned(),
            source: Some(Box::new(err)),
        },
        E::ColumnDecode { .. } | E::Decode(_) | E::ColumnNotFound(_) | E::TypeNotFound { .. } => {
            StoreError::corrupt(None, err.to_string())
        }
        E::Configuration(_) => StoreError::Config {
            message: "invalid database configuration".to_owned(),
            source: Some(Box::new(err)),
        },
        other => StoreError::Other(Box::new(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_is_the_source_only() {
        let e = StoreError::unavailable("connection refused");
        assert_eq!(
            e.to_string(),
            "the idempotency store is unavailable for now: retry after 1s"
        );
        assert_eq!(
            std::error::Error::source(&e)
                .map(ToString::to_string)
                .as_deref(),
            Some("connection refused")
        );
        assert_eq!(
            Chain(&e).to_string(),
            "the idempotency store is unavailable for now: retry after 1s: connection refused"
        );
        let other = StoreError::Other("unexpected reply".into());
        assert!(!other.to_string().contains("unexpected reply"), "{other}");
        assert!(Chain(&other).to_string().ends_with(": unexpected reply"));
    }

    #[test]
    fn a_chain_writes_a_cause_its_error_repeats_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("driver failed: {0}")]
        struct Repeats(#[source] std::io::Error);
        let io = std::io::Error::other("connection reset");
        let e = StoreError::unavailable(Repeats(io));
        assert_eq!(
            Chain(&e).to_string(),
            "the idempotency store is unavailable for now: retry after 1s: driver failed: \
             connection reset"
        );
    }

    #[test]
    fn a_chain_without_a_cause_is_the_message() {
        let e = StoreError::Invalid("zero lease".to_owned());
        assert_eq!(Chain(&e).to_string(), e.to_string());
    }
}
