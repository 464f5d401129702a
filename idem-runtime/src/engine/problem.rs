//! RFC 9457 problem details (`application/problem+json`) and the problem types of idem.
//!
//! Every idempotency error is answered with a problem document whose `type` is one of the
//! constants below: [`DEFAULT_BASE`] (this page, one section per type below) followed by the
//! type's slug. A service that documents its errors itself sets its own base once on the handle,
//! [`Idem::with_problem_base`](crate::engine::Idem::with_problem_base): its responses then say
//! `https://api.example.com/problems/key-reused` instead ([`Problem::rebase`]).
//!
//! ```
//! use idem_runtime::engine::problem::{KEY_REUSED, Problem};
//! let p = Problem::new(KEY_REUSED, "Idempotency key reused with a different request", 422,
//!     "send a new key for a new operation")
//!     .extension("idempotency_key", "k-1");
//! assert_eq!(
//!     p.to_json(),
//!     r#"{"type":"https://docs.rs/idem/latest/idem/problem/index.html#key-reused","title":"Idempotency key reused with a different request","status":422,"detail":"send a new key for a new operation","idempotency_key":"k-1"}"#,
//! );
//! let p = p.rebase("https://api.example.com/problems/");
//! assert_eq!(p.get("type").unwrap(), "https://api.example.com/problems/key-reused");
//! ```
//!
//! # Problem types
//!
//! Every `409` and `503` carries `Retry-After` (whole seconds) and the same number in the
//! `retry_after` member; `idempotency_key` echoes a valid client key.
//!
//! ### missing-key
//! `400`: the request has no `Idempotency-Key` header. Generate a unique key (a UUID) per
//! operation and send it on every retry of that operation.
//!
//! ### invalid-key
//! `400`: the key is empty, longer than 255 characters, has control characters, was sent twice,
//! or is neither an RFC 8941 sf-string nor a bare key. Send a valid key.
//!
//! ### unscoped
//! `401`: the endpoint scopes keys by the caller's identity and the request carries none.
//! Authenticate and send the request again.
//!
//! ### key-reused
//! `422`: the key was already used for a request with another fingerprint. A new operation
//! needs a new key; a retry must resend the original request unchanged. Once the first request's
//! answer is stored, `key_expires_at` (RFC 3339) says until when the key stays bound to it: the
//! end of the endpoint's TTL, or of its remember window.
//!
//! ### in-progress
//! `409`: a request with the same key and payload is still running. Retry the same request after
//! `Retry-After` seconds. On an endpoint that waits for the attempt in flight (`wait = ".."`),
//! `waited` says how many seconds this request waited before the answer (`0`: the server had
//! its most waiters already).
//!
//! ### key-expired
//! `410`: the key's operation ran and its stored response expired with the endpoint's TTL; the
//! key is still remembered (`remember = ".."`), so the operation is not run again. The problem
//! carries what the server kept: `biz_no` (the business number, when the operation gave one),
//! `operation_id`, `response_status`, `completed_at`, `expired_at` and `remember_until`
//! (RFC 3339). Look the result up by its business number; a new operation needs a new key. The
//! same key is new after `remember_until`.
//!
//! ### store-unavailable
//! `503`: the idempotency store cannot be reached; nothing was executed. Retry the same request
//! after `Retry-After` seconds.
//!
//! ### timed-out
//! `503`: the handler ran past its timeout and was stopped; it may be partly done. Retry the same
//! request: the retry continues the same operation.
//!
//! ### request-not-fingerprintable
//! `400`: (the tower layer) the body is not JSON or has no canonical form under the endpoint's
//! spec; `path` and `error` name the offending value. Fix the body; the key may be reused.
//!
//! ### invalid-body
//! `400`, `415` or `413`: (`idem::axum::Json`) the body does not deserialize, is not JSON, or is
//! too large. Fix the body; nothing ran.
//!
//! ### body-too-large
//! `413`: (the tower layer) the body exceeds the layer's limit. Send a smaller body.
//!
//! ### misconfigured
//! `500`: the server's idempotency setup is incomplete for this endpoint. Nothing to do for the
//! client: an operator must fix the server.
//!
//! ### snapshot-unreadable
//! `503`: (`run_once` only) a stored result no longer deserializes into the result type. An
//! operator's matter; the record expires with its TTL.
//!
//! ### record-sealed
//! `503` + `Retry-After: 30`: the stored response is encrypted (`Idem::with_encryption`) under a
//! key the server's key ring does not hold, or its tag does not verify (the record was altered,
//! or another key sits under its id). The operation ran already: it is neither replayed nor run
//! again, and the record stays as it is. Retry the same request later; it is answered once an
//! operator puts the key back. Why `503` and not `500`: the condition is the server's and may
//! pass (a key restored to the ring), the client's request is fine, and the answer must not
//! invite a new key, which would run the operation a second time.

use core::time::Duration;

/// The media type of problem documents.
pub const CONTENT_TYPE: &str = "application/problem+json";

/// The base of idem's problem type URIs unless a service sets its own
/// ([`Idem::with_problem_base`](crate::engine::Idem::with_problem_base)): this module's page on
/// docs.rs, where each type has a section (its slug is the section's anchor).
pub const DEFAULT_BASE: &str = "https://docs.rs/idem/latest/idem/problem/index.html#";

macro_rules! problem_type {
    ($slug:literal) => {
        concat!(
            "https://docs.rs/idem/latest/idem/problem/index.html#",
            $slug
        )
    };
}

/// `400`: the `Idempotency-Key` header is missing.
pub const MISSING_KEY: &str = problem_type!("missing-key");
/// `400`: the key is empty, longer than 255 characters, has control characters, or is neither an
/// sf-string nor a bare key.
pub const INVALID_KEY: &str = problem_type!("invalid-key");
/// `422`: the key was already used with a request of another fingerprint (S7).
pub const KEY_REUSED: &str = problem_type!("key-reused");
/// `410`: the key's stored response expired at its TTL, and the key is remembered (`remember`):
/// the operation ran once and does not run again.
pub const KEY_EXPIRED: &str = problem_type!("key-expired");
/// `409` + `Retry-After`: a request with the key is still being processed (S8).
pub const IN_PROGRESS: &str = problem_type!("in-progress");
/// `503` + `Retry-After`: the idempotency store cannot be reached; nothing was executed.
pub const STORE_UNAVAILABLE: &str = problem_type!("store-unavailable");
/// `400`: the body has no canonical form under the endpoint's fingerprint spec.
pub const REQUEST_NOT_FINGERPRINTABLE: &str = problem_type!("request-not-fingerprintable");
/// `413`: the body exceeds the tower layer's limit.
pub const BODY_TOO_LARGE: &str = problem_type!("body-too-large");
/// `503` + `Retry-After`: the handler ran past its timeout and was stopped; a retry with the
/// same key continues the same operation.
pub const TIMED_OUT: &str = problem_type!("timed-out");
/// `401`: the endpoint scopes keys by the caller's identity and the request carries none.
pub const UNSCOPED: &str = problem_type!("unscoped");
/// `500`: the server's idempotency setup is incomplete for this endpoint (an operator's fix).
pub const MISCONFIGURED: &str = problem_type!("misconfigured");
/// `503`: a stored result cannot be read back (framework-free `run_once` only).
pub const SNAPSHOT_UNREADABLE: &str = problem_type!("snapshot-unreadable");
/// `503`: the stored response is sealed under a key the handle does not hold, or was altered
/// (`Idem::with_encryption`); neither replayed nor run again.
pub const RECORD_SEALED: &str = problem_type!("record-sealed");
/// `400` / `415` / `413`: the `idem::axum::Json` extractor could not read the body. A `400`, not
/// axum's `422`, so that `422` always means "key reused".
pub const INVALID_BODY: &str = problem_type!("invalid-body");

/// Whole seconds of `d` rounded up, at least 1: the value of a `Retry-After` header.
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::engine::problem::retry_after_secs;
/// assert_eq!(retry_after_secs(Duration::ZERO), 1);
/// assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
/// assert_eq!(retry_after_secs(Duration::from_secs(7)), 7);
/// ```
pub fn retry_after_secs(d: Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

/// An RFC 9457 problem document: `type`, `title`, `status`, `detail` and extension members.
///
/// ```
/// use idem_runtime::engine::problem::Problem;
/// let p = Problem::new("https://api.example.com/problems/in-progress", "In progress", 409, "retry in 2 s")
///     .extension("retry_after", 2);
/// assert_eq!(p.status(), 409);
/// assert!(p.to_json().ends_with(r#""retry_after":2}"#));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    members: Vec<(String, serde_json::Value)>,
    status: u16,
}

impl Problem {
    /// A problem of type `type_uri`.
    ///
    /// ```
    /// use idem_runtime::engine::problem::Problem;
    /// let p = Problem::new("about:blank", "Bad", 400, "why");
    /// assert_eq!(p.to_json(), r#"{"type":"about:blank","title":"Bad","status":400,"detail":"why"}"#);
    /// ```
    pub fn new(type_uri: &str, title: &str, status: u16, detail: impl Into<String>) -> Self {
        let members = vec![
            ("type".to_owned(), type_uri.into()),
            ("title".to_owned(), title.into()),
            ("status".to_owned(), status.into()),
            ("detail".to_owned(), detail.into().into()),
        ];
        Problem { members, status }
    }

    /// Adds an extension member (RFC 9457 section 3.2), replacing one of the same name.
    ///
    /// ```
    /// use idem_runtime::engine::problem::Problem;
    /// let p = Problem::new("about:blank", "Bad", 400, "why").extension("path", "$.amount");
    /// assert!(p.to_json().contains(r#""path":"$.amount""#));
    /// ```
    #[must_use]
    pub fn extension(mut self, name: &str, value: impl Into<serde_json::Value>) -> Self {
        let value = value.into();
        match self.members.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.members.push((name.to_owned(), value)),
        }
        self
    }

    /// Moves a type under [`DEFAULT_BASE`] to `base` (`https://api.example.com/problems/` +
    /// the slug); any other type stays as it is. What [`Idem::with_problem_base`] applies to
    /// every problem document idem sends.
    ///
    /// [`Idem::with_problem_base`]: crate::engine::Idem::with_problem_base
    #[must_use]
    pub fn rebase(mut self, base: &str) -> Self {
        if let Some((_, serde_json::Value::String(t))) =
            self.members.iter_mut().find(|(n, _)| n == "type")
            && let Some(slug) = t.strip_prefix(DEFAULT_BASE)
        {
            *t = format!("{base}{slug}");
        }
        self
    }

    /// [`Problem::rebase`] onto a handle's base, if it has one.
    pub(crate) fn rebase_onto(self, base: Option<&str>) -> Self {
        match base {
            Some(base) => self.rebase(base),
            None => self,
        }
    }

    /// The `status` member.
    ///
    /// ```
    /// use idem_runtime::engine::problem::Problem;
    /// assert_eq!(Problem::new("about:blank", "t", 413, "d").status(), 413);
    /// ```
    pub fn status(&self) -> u16 {
        self.status
    }

    /// A member by name.
    ///
    /// ```
    /// use idem_runtime::engine::problem::Problem;
    /// let p = Problem::new("about:blank", "t", 400, "d");
    /// assert_eq!(p.get("title"), Some(&serde_json::Value::from("t")));
    /// ```
    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.members.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The JSON text, members in insertion order (`type`, `title`, `status`, `detail`, then the
    /// extensions).
    ///
    /// ```
    /// use idem_runtime::engine::problem::Problem;
    /// let json = Problem::new("about:blank", "t", 400, "d").to_json();
    /// assert!(json.starts_with(r#"{"type":"about:blank""#));
    /// ```
    pub fn to_json(&self) -> String {
        // Serializing strings and JSON values cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}

/// `<status> <title>: <detail>`, for logs and error chains (the document is
/// [`Problem::to_json`]).
///
/// ```
/// use idem_runtime::engine::problem::Problem;
/// let p = Problem::new("about:blank", "Bad", 400, "why");
/// assert_eq!(p.to_string(), "400 Bad: why");
/// ```
impl core::fmt::Display for Problem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let text = |name: &str| {
            self.get(name)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        };
        write!(f, "{} {}: {}", self.status, text("title"), text("detail"))
    }
}

impl serde::Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.members.len()))?;
        for (name, value) in &self.members {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}
