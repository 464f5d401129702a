//! What the flow ([`execute`](super::flow::execute)) and an [`Attempt`](super::attempt::Attempt)
//! share: the [`Front`] that answers for the caller, the [`Settlement`] of a record, the
//! [`ClaimSettings`] of a claim, the [`Answer`] to a claim not won, [`bounded`] store calls and
//! the report of a record that does not open ([`unopened`]).
//! Below both, so that the flow may own attempts without an attempt importing the flow.

use core::future::Future;
use core::time::Duration;
use std::sync::Arc;

use super::error::{Expired, IdempotencyError};
use super::handler_config::HandlerConfig;
use super::policy::Disposition;
use crate::fingerprint::RequestHash;
use crate::key::ScopedKey;
use crate::seal;
use crate::store::atomic::Atomic;
use crate::store::{Claim, Completion, DEFAULT_RETRY_AFTER, Record, StoreError};
use crate::telemetry;

/// The durations and failure mode of one claim: the part of a [`HandlerConfig`] (or of the tower
/// layer's configuration) the flow reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimSettings {
    pub lease: Duration,
    pub ttl: Duration,
    pub timeout: Duration,
    pub fail_open: bool,
    /// How long a duplicate waits for the attempt in flight ([`HandlerConfig::wait`]).
    pub wait: Duration,
    /// How long the key is remembered past the TTL ([`HandlerConfig::remember`]).
    pub remember: Option<Duration>,
}

impl ClaimSettings {
    pub(crate) const fn of(cfg: &HandlerConfig) -> ClaimSettings {
        ClaimSettings {
            lease: cfg.lease,
            ttl: cfg.ttl,
            timeout: cfg.timeout_in_force(),
            fail_open: cfg.fail_open,
            wait: cfg.wait,
            remember: cfg.remember,
        }
    }
}

/// What becomes of a finished attempt's record.
#[derive(Debug)]
pub(crate) enum Settlement {
    /// Store this snapshot (completed or failed-but-stored) for replay.
    Store(Completion),
    /// Delete the record: the operation never started (the policy's
    /// [`Release`](super::Disposition::Release)), so a corrected retry may run as a new
    /// operation.
    Release,
    /// Keep the record and its operation id, end the lease: the outcome is not final and part of
    /// the work may be done, so the retry continues the same operation.
    Abandon,
}

impl Settlement {
    /// The settlement of a disposition that stores nothing: `Release` stays a release, anything
    /// else is abandoned.
    pub(crate) fn without_result(disposition: Disposition) -> Settlement {
        match disposition {
            Disposition::Release => Settlement::Release,
            _ => Settlement::Abandon,
        }
    }
}

/// What differs between the fronts of the engine. `execute` calls exactly one of `reject`,
/// `replay`, `unprotected` or `settle` (and, for an attempt superseded while it ran, `settle`
/// followed by `replay` or `reject`).
///
/// Nothing here requires `Send`: actix-web's handlers and responses are `!Send`, and run on one
/// thread. A front of concrete types (axum's, tower's, `run_once`'s) still gets a `Send` future
/// from [`execute`](super::flow::execute) when its parts are `Send`: the auto traits of `async`
/// functions and of the futures of the impls leak through.
pub(crate) trait Front {
    /// What the handler's future yields.
    type Out;
    /// What the caller receives.
    type Answer;

    /// An idempotency condition answered instead of running the handler; `client_key` once the
    /// key was valid.
    fn reject(&self, error: IdempotencyError, client_key: Option<&str>) -> Self::Answer;

    /// A stored record of the same request.
    fn replay(self, record: Record) -> impl Future<Output = Self::Answer>;

    /// The handler's output when it ran without protection (store unavailable, `fail_open`).
    fn unprotected(self, out: Self::Out) -> Self::Answer;

    /// The handler's output: what to do with the record, and the answer. Runs while the lease
    /// is still renewed (reading a response body takes time).
    fn settle(&mut self, out: Self::Out) -> impl Future<Output = (Settlement, Self::Answer)>;

    /// The handler's transaction in the atomic mode: begun after the claim, the completion
    /// written and committed in it. `None` (the default): the two-commit mode.
    fn atomic(&self) -> Option<Arc<dyn Atomic>> {
        None
    }
}

/// What a request that did not win the claim is answered.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A stored snapshot of the same request: replay it.
    Replay(Record),
    /// An idempotency condition (`409`, `422`): the handler does not run.
    Reject(IdempotencyError),
}

/// The answer to a claim that did not acquire the key: what a retry of request `hash` sees.
pub(crate) fn answer(claim: Claim, hash: RequestHash, client_key: &str) -> Answer {
    let reused = |key_expires_at| {
        Answer::Reject(IdempotencyError::KeyReused {
            idempotency_key: client_key.to_owned(),
            key_expires_at,
        })
    };
    match claim {
        Claim::Completed(record) if record.request_hash == hash => Answer::Replay(record),
        Claim::InProgress {
            request_hash,
            retry_after,
        } if request_hash == hash => Answer::Reject(IdempotencyError::InProgress {
            retry_after,
            waited: None,
        }),
        Claim::Remembered(record) if record.request_hash == hash => Answer::Reject(
            IdempotencyError::KeyExpired(Box::new(Expired::of(&record, client_key))),
        ),
        Claim::Completed(record) | Claim::Remembered(record) => reused(Some(record.expire_at)),
        Claim::InProgress { .. } => reused(None),
        Claim::Acquired(_) => unreachable!("`answer` is only asked about claims not acquired"),
    }
}

/// `call`, or [`StoreError::Unavailable`] when the store gave no answer within `wait` (a server
/// that stalls without closing its connections, a pool that keeps reconnecting): every store
/// call of the engine goes through it, so an outage costs a request a bounded time. Outside a
/// tokio runtime (no timer) the call is awaited as it is. The time runs from this call.
pub(crate) fn bounded<T>(
    wait: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> impl Future<Output = Result<T, StoreError>> {
    bounded_from(tokio::time::Instant::now(), wait, call)
}

/// [`bounded`] for a call sent at `sent` (a time the caller read anyway: one clock read less).
pub(crate) async fn bounded_from<T>(
    sent: tokio::time::Instant,
    wait: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return call.await;
    }
    match tokio::time::timeout_at(sent + wait, call).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Unavailable {
            source: format!("the idempotency store gave no answer within {wait:?}").into(),
            retry_after: DEFAULT_RETRY_AFTER,
        }),
    }
}

/// Reports a stored record that did not open: a `warn` event with its key hash, and
/// `idem_records_unopened_total`. The record stays as it is, for inspection, until its TTL.
pub(crate) fn unopened(key: &ScopedKey, backend: &'static str, e: &seal::SealError) {
    tracing::warn!(
        target: "idem",
        operation = key.operation(),
        key_hash = %key.hash_hex(),
        reason = e.reason(),
        error = %e,
        "a stored response does not open: it is neither replayed nor overwritten; the client gets 503 record-sealed"
    );
    telemetry::unopened(key, backend, e.reason());
}
