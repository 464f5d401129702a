//! The one flow every front goes through — claim, run, store or replay — written once:
//! [`execute`], driven by a [`Front`] for what differs between the axum handlers, the tower layer
//! and `run_once` (how to answer a rejection, build a replay, encode a result).
//!
//! 1. The key is scoped (done by the front, its error passed in) and claimed ([`admit`]).
//! 2. A stored record of the same request is replayed, a conflict rejected, an unreachable store
//!    answered `503` (or the handler runs unprotected under `fail_open`).
//! 3. A claim won runs the handler under its lease ([`Attempt::drive`]): the operation id in
//!    scope, the lease renewed in the background until the result is stored, the handler stopped
//!    at its timeout.
//! 4. The front settles the handler's output into a [`Settlement`] — store it, release the
//!    record (the operation never started), or abandon it (keep the operation id, end the lease)
//!    — and the attempt carries it out, retrying a completion the store refused for the moment.
//!
//! Once the handler has started, the record is never deleted and its operation id never changes
//! except through [`Settlement::Release`], which only outcomes the policy declares effect-free
//! produce; see `docs/storage.md`, "Failure points".
//!
//! [`Front`]: super::front::Front
//! [`Settlement`]: super::front::Settlement
//! [`Settlement::Release`]: super::front::Settlement::Release

use core::future::Future;
use core::time::Duration;

use super::attempt::Attempt;
use super::error::IdempotencyError;
use super::front::{Answer, ClaimSettings, Front, answer, bounded_from, unopened};
use super::handle::Idem;
use super::operation::{fresh_operation_id, with_operation};
use super::wait::FIRST_POLL;
use crate::fingerprint::RequestHash;
use crate::key::{InvalidKey, ScopePart, ScopedKey, scoped_key};
use crate::seal;
use crate::store::{Chain, Claim, ClaimRequest, DEFAULT_RETRY_AFTER, Record};
use crate::telemetry::{self, Outcome, Waited};

/// The keys of one request: the key its client sent, and that key scoped by the caller and the
/// operation. The record is claimed, read and written under the scoped key alone; the client's
/// key is only what the answers to this client name (a problem document's `idempotency_key`).
/// Made by [`RequestKey::new`] only, so that the scoped key is always the client key's.
#[derive(Debug)]
pub(crate) struct RequestKey {
    scoped: ScopedKey,
    client: String,
}

impl RequestKey {
    /// `client`, and its scoped key for `operation` under `scope` ([`scoped_key`]).
    ///
    /// # Errors
    /// [`InvalidKey`] when `client` is not a valid key.
    pub(crate) fn new(
        operation: &str,
        scope: &[&dyn ScopePart],
        client: String,
    ) -> Result<Self, InvalidKey> {
        let scoped = scoped_key(operation, scope, &client)?;
        Ok(RequestKey { scoped, client })
    }

    /// The key the record is kept under.
    pub(crate) fn scoped(&self) -> &ScopedKey {
        &self.scoped
    }

    /// The key as the client sent it.
    pub(crate) fn client(&self) -> &str {
        &self.client
    }
}

/// Runs one request through the flow: `key` is the request's key (or why it is invalid), `hash`
/// the request's fingerprint, computed before the handler runs.
pub(crate) async fn execute<Fr, H>(
    idem: &Idem,
    settings: ClaimSettings,
    key: Result<RequestKey, IdempotencyError>,
    hash: RequestHash,
    front: Fr,
    handler: H,
) -> Fr::Answer
where
    Fr: Front,
    H: Future<Output = Fr::Out>,
{
    let key = match key {
        Ok(key) => key,
        Err(e) => return front.reject(e, None),
    };
    let (scoped, client_key) = (key.scoped(), key.client());
    match admit(idem, scoped, client_key, hash, settings).await {
        // Boxed: the attempt's state (lease keeper, handler, settlement, completion) is most
        // of this future's size, and without the box every replay and rejection would carry
        // it and copy it at each level of nesting (the whole handler future shrinks by half).
        Admission::Run(attempt) => Box::pin(attempt.drive(front, handler, client_key)).await,
        Admission::Replay(record) => {
            telemetry::request(scoped, idem.store().backend(), Outcome::Replay);
            tracing::debug!(
                target: "idem",
                operation = scoped.operation(),
                key_hash = %scoped.hash_hex(),
                status = record.status,
                "completed with the same request: replaying the stored response"
            );
            front.replay(record).await
        }
        Admission::Reject(e) => {
            let backend = idem.store().backend();
            match &e {
                IdempotencyError::InProgress { retry_after, .. } => {
                    telemetry::request(scoped, backend, Outcome::InProgress);
                    tracing::debug!(
                        target: "idem",
                        operation = scoped.operation(),
                        key_hash = %scoped.hash_hex(),
                        ?retry_after,
                        "another attempt holds the lease: answering 409 with Retry-After"
                    );
                }
                IdempotencyError::KeyReused { .. } => {
                    telemetry::request(scoped, backend, Outcome::KeyReused);
                    tracing::debug!(
                        target: "idem",
                        operation = scoped.operation(),
                        key_hash = %scoped.hash_hex(),
                        "the key was used for another request: answering 422"
                    );
                }
                IdempotencyError::Unavailable { .. } => {
                    telemetry::request(scoped, backend, Outcome::Unavailable);
                }
                IdempotencyError::KeyExpired(expired) => {
                    telemetry::request(scoped, backend, Outcome::KeyExpired);
                    tracing::debug!(
                        target: "idem",
                        operation = scoped.operation(),
                        key_hash = %scoped.hash_hex(),
                        operation_id = %expired.operation_id,
                        expired_at = %expired.expired_at.to_rfc3339(),
                        remember_until = %expired.remember_until.to_rfc3339(),
                        "the key's response expired with its TTL and the key is remembered: answering 410"
                    );
                }
                _ => {}
            }
            front.reject(e, Some(client_key))
        }
        Admission::Unprotected => {
            telemetry::request(scoped, idem.store().backend(), Outcome::Unprotected);
            let out = with_operation(fresh_operation_id(), handler).await;
            front.unprotected(out)
        }
    }
}

/// What the claim decided.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Fresh (or taken over): run the handler.
    Run(Attempt),
    /// A stored snapshot of the same request: replay it.
    Replay(Record),
    /// Answer with this error; the handler does not run.
    Reject(IdempotencyError),
    /// The store is unavailable and the handler fails open: run it without protection.
    Unprotected,
}

/// Claims `key` for a request hashing to `hash`.
///
/// * `Completed` with another request hash, and `InProgress` with another request hash (an
///   expired lease of another request is never taken over), are `KeyReused` (422, S7);
/// * `InProgress` with the same hash is `InProgress` (409 + `Retry-After`, S8);
/// * any store error is `Unavailable` (503 + `Retry-After`: the error's own wait, 1 s by default),
///   unless the handler fails open. A non-transient error (a missing table, a corrupt row) is
///   answered the same way: the client cannot fix it, and a 500 would invite endless retries (S9).
///
/// With a replay cache ([`Idem::with_replay_cache`]), a cached record of the same request is
/// replayed without a claim, and a completed record a claim finds is cached.
///
/// With a wait ([`HandlerConfig::wait`](super::HandlerConfig::wait)), an `InProgress` of the
/// same request waits for the attempt in flight ([`wait_for_first`]).
pub(crate) async fn admit(
    idem: &Idem,
    key: &ScopedKey,
    client_key: &str,
    hash: RequestHash,
    settings: ClaimSettings,
) -> Admission {
    // An encrypting handle stores nothing readable of the key either.
    let opaque;
    let key = match idem.key_ring() {
        Some(ring) if ring.seals() => {
            opaque = key.opaque();
            &opaque
        }
        _ => key,
    };
    if let Some(record) = idem
        .replay_cache()
        .and_then(|c| c.get(key, &hash, idem.store().clock()))
    {
        telemetry::replay_cache_hit(key, idem.store().backend());
        return Admission::Replay(record);
    }
    match claim(idem, key, client_key, hash, settings).await {
        // Waiting needs a timer: outside a tokio runtime the duplicate is answered at once.
        first @ Admission::Reject(IdempotencyError::InProgress { .. })
            if !settings.wait.is_zero() && tokio::runtime::Handle::try_current().is_ok() =>
        {
            wait_for_first(idem, key, client_key, hash, settings, first).await
        }
        admission => admission,
    }
}

/// A duplicate that found the attempt of its request in flight (`first`, an `InProgress`) waits
/// for it, up to `settings.wait`, and is then admitted as a retry would be: claimed again each
/// time the attempt settles in this process ([`Waiters::wake`]), and on a backed-off schedule
/// for an attempt of another process. Past the bound, or over the handle's cap of waiters, the
/// last `InProgress` is the answer (`409` + `Retry-After`, `waited`); an attempt of this process
/// that settled during the last claim before the bound earns one claim more, past it, so that
/// a waiter is not answered `409` for a record stored a moment before. Dropped (the client hung up), it
/// leaves nothing behind: the waiter is counted out as it drops.
///
/// [`Waiters::wake`]: super::wait::Waiters::wake
async fn wait_for_first(
    idem: &Idem,
    key: &ScopedKey,
    client_key: &str,
    hash: RequestHash,
    settings: ClaimSettings,
    first: Admission,
) -> Admission {
    let backend = idem.store().backend();
    let Some(waiter) = idem.waiters().enter(key) else {
        telemetry::waited(key, backend, Waited::OverCap);
        tracing::debug!(
            target: "idem",
            operation = key.operation(),
            key_hash = %key.hash_hex(),
            max_waiters = idem.max_waiters(),
            "the first attempt is in flight and the handle has its most waiters: answering 409"
        );
        return waited(first, Duration::ZERO);
    };
    let mut count = WaitCount::start(key, backend);
    let start = tokio::time::Instant::now();
    let deadline = start + settings.wait;
    let (mut poll, mut last) = (FIRST_POLL, first);
    let mut armed = waiter.armed();
    // Past the bound, a pause lets one claim more through when the attempt settled during the
    // last claim; that claim is the last (at most one claim past the bound).
    while waiter.pause(armed, &mut poll, deadline).await {
        // Armed before the claim: a settlement during it wakes the next pause.
        armed = waiter.armed();
        let past_the_bound = tokio::time::Instant::now() >= deadline;
        match claim(idem, key, client_key, hash, settings).await {
            now @ Admission::Reject(IdempotencyError::InProgress { .. }) => last = now,
            // The store failed this claim: the attempt in flight is all the waiter knows of;
            // it waits on, and is answered `409` at the bound — never run unprotected
            // (`fail_open`) beside an attempt it saw running.
            Admission::Unprotected | Admission::Reject(IdempotencyError::Unavailable { .. }) => {}
            answered => {
                count.ended(Waited::Answered);
                return answered;
            }
        }
        if past_the_bound {
            break;
        }
    }
    count.ended(Waited::TimedOut);
    tracing::debug!(
        target: "idem",
        operation = key.operation(),
        key_hash = %key.hash_hex(),
        wait = ?settings.wait,
        "the first attempt is still in flight after the wait: answering 409"
    );
    waited(last, start.elapsed())
}

/// A waiter's `409`: `admission`, an `InProgress`, saying how long the request waited.
fn waited(admission: Admission, how_long: Duration) -> Admission {
    match admission {
        Admission::Reject(IdempotencyError::InProgress { retry_after, .. }) => {
            Admission::Reject(IdempotencyError::InProgress {
                retry_after,
                waited: Some(how_long),
            })
        }
        other => other,
    }
}

/// One claim of `key` (already opaque when the handle seals) and what it admits.
async fn claim(
    idem: &Idem,
    key: &ScopedKey,
    client_key: &str,
    hash: RequestHash,
    settings: ClaimSettings,
) -> Admission {
    let cache = idem.replay_cache();
    let mut req = ClaimRequest::new(key, hash, settings.lease, settings.ttl);
    if let Some(remember) = settings.remember {
        req = req.remembering(remember);
    }
    // Measured before the claim is sent: the lease cannot end earlier than this plus its length.
    let sent = tokio::time::Instant::now();
    let wait = idem.store_timeout();
    let backend = idem.store().backend();
    let claim = bounded_from(sent, wait, idem.store().claim(&req));
    let claimed = telemetry::store_call(backend, "claim", claim);
    let claimed = match claimed.await {
        // A record of another request is refused below without being opened.
        Ok(Claim::Completed(record)) if record.request_hash == hash => {
            match seal::open_record(idem.key_ring(), key, record) {
                Ok(record) => Ok(Claim::Completed(record)),
                Err(e) => {
                    unopened(key, backend, &e);
                    return Admission::Reject(IdempotencyError::Sealed(e));
                }
            }
        }
        // What a remembered record keeps of its response may be sealed too (the business
        // number); once the purge freed the response there is nothing left to open.
        Ok(Claim::Remembered(record)) if record.request_hash == hash => {
            match seal::open_remembered(idem.key_ring(), key, record) {
                Ok(record) => Ok(Claim::Remembered(record)),
                Err(e) => {
                    unopened(key, backend, &e);
                    return Admission::Reject(IdempotencyError::Sealed(e));
                }
            }
        }
        claimed => claimed,
    };
    match claimed {
        Ok(Claim::Acquired(lease)) => {
            let outcome = if lease.took_over {
                Outcome::Takeover
            } else {
                Outcome::Fresh
            };
            telemetry::request(key, backend, outcome);
            let attempt = Attempt::new(idem.store().clone(), lease, settings, wait, sent);
            let attempt = attempt
                .with_replay_cache(cache.cloned())
                .with_key_ring(idem.shared_key_ring());
            // Only a handler that waits has waiters to wake: the others pay nothing.
            Admission::Run(if settings.wait.is_zero() {
                attempt
            } else {
                attempt.with_waiters(idem.waiters().clone())
            })
        }
        Ok(claim) => match answer(claim, hash, client_key) {
            Answer::Replay(record) => {
                if let Some(c) = cache {
                    c.insert(key, &record, idem.store().clock());
                }
                Admission::Replay(record)
            }
            Answer::Reject(e) => Admission::Reject(e),
        },
        Err(e) if settings.fail_open => {
            tracing::warn!(
                target: "idem",
                operation = key.operation(),
                key_hash = %key.hash_hex(),
                error = %Chain(&e),
                "idempotency store unavailable; the handler fails open and runs unprotected"
            );
            Admission::Unprotected
        }
        Err(e) => {
            tracing::warn!(
                target: "idem",
                operation = key.operation(),
                key_hash = %key.hash_hex(),
                error = %Chain(&e),
                "idempotency store unavailable; answering 503 with Retry-After"
            );
            Admission::Reject(IdempotencyError::Unavailable {
                retry_after: e.retry_after().unwrap_or(DEFAULT_RETRY_AFTER),
            })
        }
    }
}

/// One wait in the telemetry: `idem_waiting` up while it lasts, and its outcome in
/// `idem_waits_total` — `left` when the request is dropped mid-wait (its client hung up).
struct WaitCount<'a> {
    key: &'a ScopedKey,
    backend: &'static str,
    ended: bool,
}

impl<'a> WaitCount<'a> {
    fn start(key: &'a ScopedKey, backend: &'static str) -> Self {
        telemetry::waiting(key, backend, 1.0);
        WaitCount {
            key,
            backend,
            ended: false,
        }
    }

    fn ended(&mut self, waited: Waited) {
        telemetry::waited(self.key, self.backend, waited);
        self.ended = true;
    }
}

impl Drop for WaitCount<'_> {
    fn drop(&mut self) {
        telemetry::waiting(self.key, self.backend, -1.0);
        if !self.ended {
            telemetry::waited(self.key, self.backend, Waited::Left);
        }
    }
}
