//! The claim step and one [`Attempt`]: running the handler under its lease (operation id in scope,
//! lease extended in the background), then completing or releasing it, and releasing it when the
//! attempt is dropped before either (client gone, panic).

use core::convert::Infallible;
use core::future::Future;
use core::time::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::config::Idem;
use super::error::IdempotencyError;
use super::operation::{OperationId, with_operation};
use crate::fingerprint::RequestHash;
use crate::store::{
    Claim, ClaimRequest, Completion, DEFAULT_RETRY_AFTER, Lease, Record, ScopedKey, Store,
    StoreError,
};

/// The durations and failure mode of one claim.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub lease: Duration,
    pub ttl: Duration,
    pub fail_open: bool,
}

/// What the claim decided.
#[derive(Debug)]
pub(crate) enum Begin {
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
pub(crate) async fn begin(
    idem: &Idem,
    key: &ScopedKey,
    client_key: &str,
    hash: RequestHash,
    terms: Terms,
) -> Begin {
    let req = ClaimRequest::new(key, hash, terms.lease, terms.ttl);
    let reused = || {
        Begin::Reject(IdempotencyError::KeyReused {
            idempotency_key: client_key.to_owned(),
        })
    };
    match idem.store().claim(&req).await {
        Ok(Claim::Acquired(lease)) => Begin::Run(Attempt::new(idem.store().clone(), lease, terms)),
        Ok(Claim::Completed(record)) if record.request_hash == hash => Begin::Replay(record),
        Ok(Claim::Completed(_)) => reused(),
        Ok(Claim::InProgress {
            request_hash,
            retry_after,
        }) if request_hash == hash => Begin::Reject(IdempotencyError::InProgress { retry_after }),
        Ok(Claim::InProgress { .. }) => reused(),
        Err(e) if terms.fail_open => {
            tracing::warn!(
                target: "idem",
                key = key.readable(),
                error = %e,
                "idempotency store unavailable; the handler fails open and runs unprotected"
            );
            Begin::Unprotected
        }
        Err(e) => {
            tracing::warn!(
                target: "idem",
                key = key.readable(),
                error = %e,
                "idempotency store unavailable; answering 503 with Retry-After"
            );
            Begin::Reject(IdempotencyError::Unavailable {
                retry_after: e.retry_after().unwrap_or(DEFAULT_RETRY_AFTER),
            })
        }
    }
}

/// A claimed key: the handler runs under its lease.
///
/// Dropped while still armed (the handler future was dropped because the client went away, or it
/// panicked), it releases the lease on the current tokio runtime, so a retry runs at once. Outside
/// a tokio runtime nothing can be spawned: the lease then simply expires.
#[derive(Debug)]
pub(crate) struct Attempt {
    store: Arc<dyn Store>,
    lease: Lease,
    lease_len: Duration,
    armed: bool,
    fenced: Arc<AtomicBool>,
}

impl Attempt {
    fn new(store: Arc<dyn Store>, lease: Lease, terms: Terms) -> Self {
        Attempt {
            store,
            lease,
            lease_len: terms.lease,
            armed: true,
            fenced: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The operation id handed to the handler.
    pub(crate) fn operation(&self) -> OperationId {
        OperationId::new(&self.lease.operation_id, self.lease.took_over, true)
    }

    /// Runs `handler` with the operation id in scope, extending the lease every `lease / 2`
    /// while it runs (on a tokio runtime). A lease lost meanwhile (fenced out by a takeover)
    /// marks the attempt: its result will not be stored.
    pub(crate) async fn run<F: Future>(&self, handler: F) -> F::Output {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            target: "idem",
            "idempotent",
            key = self.lease.key.readable(),
            operation_id = %self.lease.operation_id,
            fence = self.lease.fence,
            took_over = self.lease.took_over,
        );
        let handler = with_operation(self.operation(), handler).instrument(span);
        if tokio::runtime::Handle::try_current().is_err() {
            return handler.await;
        }
        let extender = extend_lease(
            self.store.clone(),
            self.lease.clone(),
            self.lease_len,
            self.fenced.clone(),
        );
        tokio::pin!(handler);
        tokio::pin!(extender);
        tokio::select! {
            biased;
            out = &mut handler => out,
            never = &mut extender => match never {},
        }
    }

    /// `true` once a takeover fenced this attempt out.
    pub(crate) fn fenced_out(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    fn fenced_error(&self) -> StoreError {
        StoreError::FencedOut {
            key: self.lease.key.readable().to_owned(),
            fence: self.lease.fence,
        }
    }

    /// Stores the snapshot and ends the lease. Stays armed until the store answered, so that a
    /// future dropped mid-way still releases (harmless if the completion went through: the
    /// release is then fenced out).
    ///
    /// The caller's answer does not depend on the outcome, so a completion that fails is
    /// reported as a `tracing` event (target `idem`): the handler ran, its result was returned,
    /// and what a retry will see is said in the event.
    pub(crate) async fn complete(&mut self, completion: &Completion) -> Result<(), StoreError> {
        let result = if self.fenced_out() {
            Err(self.fenced_error())
        } else {
            self.store.complete(&self.lease, completion).await
        };
        self.armed = false;
        if let Err(e) = &result {
            self.report("result not stored", e);
        }
        result
    }

    /// Deletes the record: nothing was saved, a retry with the same key runs.
    pub(crate) async fn release(&mut self) -> Result<(), StoreError> {
        let result = if self.fenced_out() {
            Err(self.fenced_error())
        } else {
            self.store.release(&self.lease).await
        };
        self.armed = false;
        if let Err(e) = &result {
            self.report("lease not released", e);
        }
        result
    }

    fn report(&self, what: &str, e: &StoreError) {
        let (key, operation_id) = (self.lease.key.readable(), &self.lease.operation_id);
        match e {
            StoreError::FencedOut { .. } => tracing::warn!(
                target: "idem",
                key,
                %operation_id,
                fence = self.lease.fence,
                "{what}: the lease expired while the handler ran and a retry took the operation \
                 over (fenced out); the attempt that took over stores its own result"
            ),
            e => tracing::error!(
                target: "idem",
                key,
                %operation_id,
                error = %e,
                "{what}: {e}; the record stays in progress until its lease expires, then a retry \
                 runs the operation again (it reuses the operation id)"
            ),
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.armed || self.fenced_out() {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            let lease = self.lease.clone();
            handle.spawn(async move {
                // Fenced out or unavailable: the lease expires on its own.
                let _ = store.release(&lease).await;
            });
        }
    }
}

/// Renews `lease` by `lease_len` every `lease_len / 2` (at least every millisecond), forever; a
/// fenced-out renewal sets `fenced` and stops renewing. Transient failures are retried at the next
/// tick.
async fn extend_lease(
    store: Arc<dyn Store>,
    mut lease: Lease,
    lease_len: Duration,
    fenced: Arc<AtomicBool>,
) -> Infallible {
    let period = (lease_len / 2).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        match store.extend(&lease, lease_len).await {
            Ok(renewed) => lease = renewed,
            Err(StoreError::FencedOut { .. }) => {
                tracing::warn!(
                    target: "idem",
                    key = lease.key.readable(),
                    operation_id = %lease.operation_id,
                    fence = lease.fence,
                    "lease lost while the handler runs: a retry took the operation over; this \
                     attempt's result will not be stored"
                );
                fenced.store(true, Ordering::SeqCst);
                return core::future::pending().await;
            }
            Err(e) => tracing::debug!(
                target: "idem",
                key = lease.key.readable(),
                error = %e,
                "lease renewal failed; retried at the next tick"
            ),
        }
    }
}
