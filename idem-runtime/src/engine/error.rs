//! [`IdempotencyError`].

use core::time::Duration;

use super::problem::{self, Problem};
use crate::json::CanonicalError;
use crate::key::InvalidKey;
use crate::store::{Chain, Record, Timestamp};

/// An idempotency condition that stops a request before (or instead of) its handler.
///
/// Over HTTP every variant becomes an `application/problem+json` response (RFC 9457) with the
/// [`IdempotencyError::status`] and [`IdempotencyError::problem_type`] documented in
/// `docs/http.md`; none is ever `429` or `500` (S9). Framework-free code ([`run_once`]) gets it
/// through `E::from(IdempotencyError)`.
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::engine::IdempotencyError;
/// let e = IdempotencyError::InProgress { retry_after: Duration::from_millis(1500), waited: None };
/// assert_eq!(e.status(), 409);
/// assert_eq!(e.retry_after(), Some(Duration::from_secs(2))); // whole seconds, rounded up
/// assert_eq!(e.problem_type(), "https://docs.rs/idem/latest/idem/problem/index.html#in-progress");
/// ```
///
/// [`run_once`]: super::run_once
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// No key was sent (`400`, `missing-key`).
    #[error(
        "the `{header}` header is missing: this endpoint requires one; generate a unique key (e.g. a UUID) per operation and send the same key on every retry"
    )]
    MissingKey {
        /// The expected header.
        header: String,
    },
    /// The key is unusable (`400`, `invalid-key`).
    #[error(transparent)]
    InvalidKey(#[from] InvalidKey),
    /// The key was first used for a request with another fingerprint (`422`, `key-reused`, S7).
    #[error(
        "idempotency key `{idempotency_key}` was already used for a different request: send a new key for a new operation, or resend the original request unchanged"
    )]
    KeyReused {
        /// The client's key.
        idempotency_key: String,
        /// Until when the key stays bound to its first request (the end of its record: the TTL,
        /// or the remember window of a remembered key), when the key's operation has stored
        /// its response; `None` while it is in flight. Past it the key is new. Sent as the
        /// problem's `key_expires_at` member (RFC 3339).
        key_expires_at: Option<Timestamp>,
    },
    /// The key's operation ran, and its stored response expired at the endpoint's TTL; the key
    /// is remembered past it ([`HandlerConfig::remember`]), so the operation does not run again
    /// (`410`, `key-expired`). What the record kept identifies the operation ([`Expired`]).
    ///
    /// [`HandlerConfig::remember`]: super::HandlerConfig::remember
    #[error(
        "the stored response of idempotency key `{}` expired at {}, and its operation ran once already: it is not run again; look its result up{}, or send a new key for a new operation",
        .0.idempotency_key,
        .0.expired_at.to_rfc3339(),
        .0.biz_no.as_deref().map(|b| format!(" by its business number `{b}`")).unwrap_or_default()
    )]
    KeyExpired(Box<Expired>),
    /// A request with this key is still running (`409` + `Retry-After`, `in-progress`, S8).
    #[error(
        "a request with this idempotency key is still being processed{}: retry in {} s with the same key",
        .waited.map(|w| format!(" (this one waited {} s for it)", waited_secs(w))).unwrap_or_default(),
        retry_secs(*.retry_after)
    )]
    InProgress {
        /// Time left on the holder's lease.
        retry_after: Duration,
        /// How long this request waited for the attempt in flight before this answer, on an
        /// endpoint that waits ([`HandlerConfig::wait`]): the bound, or zero when the handle had
        /// its most waiters already. `None` on an endpoint that does not wait. Sent as the
        /// problem's `waited` member (seconds, to the millisecond).
        ///
        /// [`HandlerConfig::wait`]: super::HandlerConfig::wait
        waited: Option<Duration>,
    },
    /// The store cannot be reached; the handler did not run (`503` + `Retry-After`,
    /// `store-unavailable`).
    #[error(
        "the idempotency store is unavailable, the request was not executed: retry in {} s with the same key",
        retry_secs(*.retry_after)
    )]
    Unavailable {
        /// Suggested wait.
        retry_after: Duration,
    },
    /// The request body has no canonical form under the endpoint's spec (`400`,
    /// `request-not-fingerprintable`).
    #[error("the request cannot be fingerprinted")]
    Fingerprint(#[from] CanonicalError),
    /// The request body exceeds the layer's limit (`413`, `body-too-large`).
    #[error(
        "the request body exceeds {limit} bytes, the most this endpoint reads: send a smaller body"
    )]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A stored result could not be written or read back (`run_once`: the stored JSON does not
    /// deserialize into the result type, e.g. after the type changed). `503`,
    /// `snapshot-unreadable`; retrying helps only once the record expires.
    #[error(
        "the stored result of this operation cannot be read or written as its result type: a retry with this key succeeds only once the record expires"
    )]
    Snapshot(#[from] serde_json::Error),
    /// The stored response of this key is sealed ([`Idem::with_encryption`]) and does not open:
    /// its key is not in the handle's key ring, or the record was altered (`503` +
    /// `Retry-After`, `record-sealed`). The operation ran once already; the record is neither
    /// replayed nor overwritten, and a retry with the same key gets its answer once the key is
    /// back in the ring.
    ///
    /// [`Idem::with_encryption`]: super::Idem::with_encryption
    #[error(
        "the stored response of this operation cannot be opened, and the operation is not run again: retry with the same key later"
    )]
    Sealed(#[from] crate::seal::SealError),
    /// The handler ran longer than its timeout and was stopped (`503` + `Retry-After`,
    /// `timed-out`). Its operation may be partly done: the record keeps its operation id with
    /// its lease ended, so a retry with the same key takes it over at once and continues the
    /// same operation (S22).
    #[error(
        "the request with this idempotency key did not finish within {} s and was stopped; it may be partly done: retry with the same key, which continues the same operation",
        retry_secs(*.after)
    )]
    TimedOut {
        /// The timeout that ran out.
        after: Duration,
    },
    /// The endpoint scopes keys by the caller's identity and the request carries none (`401`,
    /// `unscoped`): the default scope ([`Idem::with_default_scope`]) returned `None`.
    ///
    /// [`Idem::with_default_scope`]: super::Idem::with_default_scope
    #[error(
        "this endpoint scopes idempotency keys by the caller's identity, and the request carries none: authenticate, then send the request again with the same key"
    )]
    Unscoped,
    /// The server is set up wrongly for this endpoint (`500`, `misconfigured`): e.g. a handler
    /// with `scope = default` on an [`Idem`](super::Idem) handle without a default scope. Not an
    /// idempotency condition the client can resolve; the message says what to fix.
    #[error("the idempotency setup of this endpoint is incomplete: {message}")]
    Misconfigured {
        /// What to fix, for the operator.
        message: &'static str,
    },
}

/// What a remembered key's record keeps of its operation, past its TTL: the content of a
/// `key-expired` answer ([`IdempotencyError::KeyExpired`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Expired {
    /// The client's key.
    pub idempotency_key: String,
    /// The business number the operation stored (S11), if it gave one. A record sealed
    /// ([`Idem::with_encryption`](super::Idem::with_encryption)) keeps it in a sealed receipt
    /// beside its response, which outlives the response.
    pub biz_no: Option<String>,
    /// The operation's stable id.
    pub operation_id: String,
    /// The status of the stored response.
    pub status: Option<u16>,
    /// When the response was stored.
    pub completed_at: Option<Timestamp>,
    /// When the response expired (the end of the TTL).
    pub expired_at: Timestamp,
    /// Until when the key is remembered; a request after it is a new operation.
    pub remember_until: Timestamp,
}

impl Expired {
    /// What `record`, a remembered record ([`Claim::Remembered`](crate::store::Claim)), says
    /// to the client that sent `idempotency_key`.
    pub(crate) fn of(record: &Record, idempotency_key: &str) -> Self {
        Expired {
            idempotency_key: idempotency_key.to_owned(),
            biz_no: record.biz_no.clone(),
            operation_id: record.operation_id.clone(),
            status: record.status,
            completed_at: record.completed_at,
            expired_at: record.replays_until(),
            remember_until: record.expire_at,
        }
    }
}

/// The `Retry-After` of [`IdempotencyError::Sealed`].
const SEALED_RETRY_AFTER: Duration = Duration::from_secs(30);

fn retry_secs(d: Duration) -> u64 {
    problem::retry_after_secs(d)
}

/// `d` in seconds, to the millisecond: the `waited` member.
fn waited_secs(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}

impl IdempotencyError {
    /// The HTTP status: 400, 401, 409, 410, 413, 422 or 503 — never 429, and never 500 (S9) for an
    /// idempotency condition. The one `500` is [`IdempotencyError::Misconfigured`], a server set
    /// up wrongly, which no retry resolves.
    ///
    /// ```
    /// use idem_runtime::engine::IdempotencyError;
    /// let e = IdempotencyError::KeyReused { idempotency_key: "k".into(), key_expires_at: None };
    /// assert_eq!(e.status(), 422);
    /// ```
    pub fn status(&self) -> u16 {
        match self {
            IdempotencyError::MissingKey { .. }
            | IdempotencyError::InvalidKey(_)
            | IdempotencyError::Fingerprint(_) => 400,
            IdempotencyError::KeyReused { .. } => 422,
            IdempotencyError::KeyExpired(_) => 410,
            IdempotencyError::Unscoped => 401,
            IdempotencyError::Misconfigured { .. } => 500,
            IdempotencyError::InProgress { .. } => 409,
            IdempotencyError::BodyTooLarge { .. } => 413,
            IdempotencyError::Unavailable { .. }
            | IdempotencyError::Snapshot(_)
            | IdempotencyError::Sealed(_)
            | IdempotencyError::TimedOut { .. } => 503,
        }
    }

    /// The `Retry-After` to send, in whole seconds rounded up (at least 1): for `409`
    /// (in progress), `503` (store unavailable) and `503` (timed out: 1 s, the record is free to
    /// take over at once).
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::IdempotencyError;
    /// let e = IdempotencyError::Unavailable { retry_after: Duration::from_millis(10) };
    /// assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
    /// let t = IdempotencyError::TimedOut { after: Duration::from_secs(120) };
    /// assert_eq!(t.retry_after(), Some(Duration::from_secs(1)));
    /// let k = IdempotencyError::KeyReused { idempotency_key: "k".into(), key_expires_at: None };
    /// assert_eq!(k.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            IdempotencyError::InProgress { retry_after, .. }
            | IdempotencyError::Unavailable { retry_after } => {
                Some(Duration::from_secs(retry_secs(*retry_after)))
            }
            IdempotencyError::TimedOut { .. } => Some(Duration::from_secs(1)),
            // An operator's fix (a key put back into the ring): not a matter of a second.
            IdempotencyError::Sealed(_) => Some(SEALED_RETRY_AFTER),
            _ => None,
        }
    }

    /// The problem type URI under [`problem::DEFAULT_BASE`] (`<base><slug>`), see [`problem`];
    /// [`Idem::problem`](super::Idem::problem) applies a handle's own base.
    ///
    /// ```
    /// use idem_runtime::engine::IdempotencyError;
    /// let e = IdempotencyError::MissingKey { header: "Idempotency-Key".into() };
    /// assert_eq!(e.problem_type(), "https://docs.rs/idem/latest/idem/problem/index.html#missing-key");
    /// ```
    pub fn problem_type(&self) -> &'static str {
        match self {
            IdempotencyError::MissingKey { .. } => problem::MISSING_KEY,
            IdempotencyError::InvalidKey(_) => problem::INVALID_KEY,
            IdempotencyError::KeyReused { .. } => problem::KEY_REUSED,
            IdempotencyError::KeyExpired(_) => problem::KEY_EXPIRED,
            IdempotencyError::InProgress { .. } => problem::IN_PROGRESS,
            IdempotencyError::TimedOut { .. } => problem::TIMED_OUT,
            IdempotencyError::Unscoped => problem::UNSCOPED,
            IdempotencyError::Misconfigured { .. } => problem::MISCONFIGURED,
            IdempotencyError::Unavailable { .. } => problem::STORE_UNAVAILABLE,
            IdempotencyError::Fingerprint(_) => problem::REQUEST_NOT_FINGERPRINTABLE,
            IdempotencyError::BodyTooLarge { .. } => problem::BODY_TOO_LARGE,
            IdempotencyError::Snapshot(_) => problem::SNAPSHOT_UNREADABLE,
            IdempotencyError::Sealed(_) => problem::RECORD_SEALED,
        }
    }

    /// The RFC 9457 problem details of this error. `idempotency_key` (the client's key, when it
    /// was valid) is echoed as an extension member, and so is what the variant knows of the
    /// key's windows: `waited` (`409`), `key_expires_at` (`422`), `expired_at` and
    /// `remember_until` (`410`).
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::IdempotencyError;
    /// let waited = Some(Duration::from_millis(2000));
    /// let p = IdempotencyError::InProgress { retry_after: Duration::from_secs(3), waited }
    ///     .problem(Some("k-1"));
    /// let json: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    /// assert_eq!(json["status"], 409);
    /// assert_eq!(json["retry_after"], 3);
    /// assert_eq!(json["waited"], 2.0);
    /// assert_eq!(json["idempotency_key"], "k-1");
    /// ```
    pub fn problem(&self, idempotency_key: Option<&str>) -> Problem {
        let title = match self {
            IdempotencyError::MissingKey { .. } => "Idempotency key missing",
            IdempotencyError::InvalidKey(_) => "Invalid idempotency key",
            IdempotencyError::KeyReused { .. } => "Idempotency key reused with a different request",
            IdempotencyError::KeyExpired(_) => "Idempotency key expired",
            IdempotencyError::InProgress { .. } => "Request with this idempotency key in progress",
            IdempotencyError::TimedOut { .. } => "Request timed out",
            IdempotencyError::Unscoped => "Request without an identity to scope its key",
            IdempotencyError::Misconfigured { .. } => "Idempotency misconfigured",
            IdempotencyError::Unavailable { .. } => "Idempotency store unavailable",
            IdempotencyError::Fingerprint(_) => "Request cannot be fingerprinted",
            IdempotencyError::BodyTooLarge { .. } => "Request body too large",
            IdempotencyError::Snapshot(_) => "Stored response unreadable",
            IdempotencyError::Sealed(_) => "Stored response cannot be opened",
        };
        // The detail carries the cause too: which value cannot be fingerprinted, and why.
        let detail = Chain(self).to_string();
        let mut p = Problem::new(self.problem_type(), title, self.status(), detail);
        if let Some(d) = self.retry_after() {
            p = p.extension("retry_after", d.as_secs());
        }
        if let Some(k) = idempotency_key {
            p = p.extension("idempotency_key", k);
        }
        if let IdempotencyError::InProgress {
            waited: Some(waited),
            ..
        } = self
        {
            p = p.extension("waited", waited_secs(*waited));
        }
        if let IdempotencyError::KeyReused {
            key_expires_at: Some(at),
            ..
        } = self
        {
            p = p.extension("key_expires_at", at.to_rfc3339());
        }
        if let IdempotencyError::KeyExpired(e) = self {
            if let Some(biz_no) = &e.biz_no {
                p = p.extension("biz_no", biz_no.as_str());
            }
            p = p.extension("operation_id", e.operation_id.as_str());
            if let Some(status) = e.status {
                p = p.extension("response_status", status);
            }
            if let Some(at) = e.completed_at {
                p = p.extension("completed_at", at.to_rfc3339());
            }
            p = p
                .extension("expired_at", e.expired_at.to_rfc3339())
                .extension("remember_until", e.remember_until.to_rfc3339());
        }
        if let IdempotencyError::Fingerprint(e) = self {
            p = p.extension("error", e.kind());
            if let Some(path) = e.path().filter(|p| !p.is_empty()) {
                p = p.extension("path", path);
            }
        }
        p
    }
}
