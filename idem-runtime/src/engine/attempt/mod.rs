//! One [`Attempt`]: the handler running under its lease — operation id in scope, lease renewed in
//! the background, stopped at its timeout — and the settlement of its record afterwards: the
//! completion retried while the lease is held, the record abandoned (never deleted) when the
//! attempt ends without a result. The atomic mode's transaction, begun before the handler and
//! committed with its result, is in `atomic`.

use core::convert::Infallible;
use core::future::Future;
use core::time::Duration;
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::Instant;

use super::error::IdempotencyError;
use super::front::{Answer, ClaimSettings, Front, Settlement, answer, bounded};
use super::operation::{OperationId, with_operation};
use super::replay_cache::ReplayCache;
use super::wait::Waiters;
use crate::seal::{self, KeyRing};
use crate::store::{
    Chain, Claim, Completion, DEFAULT_RETRY_AFTER, Lease, RecordState, Store, StoreError,
};
use crate::telemetry::{self, Settled};

mod atomic;

/// First wait before a completion the store refused for the moment is sent again; it doubles up
/// to [`MAX_COMPLETION_BACKOFF`].
const FIRST_COMPLETION_BACKOFF: Duration = Duration::from_millis(20);
/// Longest wait between two tries of a completion.
const MAX_COMPLETION_BACKOFF: Duration = Duration::from_secs(1);

/// A claimed key: the handler runs under its lease.
///
/// Dropped before its record was settled (the request future was dropped because the client went
/// away or a timeout layer fired, the handler panicked, the response body failed), it
/// **abandons** the record on the current tokio runtime: the record stays, processing, with its
/// operation id, and its lease ends at once, so the next retry takes it over immediately and
/// continues the same operation (S22) — it is never deleted, because the handler may have done
/// part of its work under that operation id. Outside a tokio runtime nothing can be spawned: the
/// lease then runs out on its own, with the same result a lease later.
#[derive(Debug)]
pub(crate) struct Attempt {
    store: Arc<dyn Store>,
    lease: Lease,
    settings: ClaimSettings,
    /// The longest wait for one answer of the store.
    wait: Duration,
    /// The record still needs settling: abandon it on drop.
    armed: bool,
    held: Arc<Held>,
    /// No completion is tried after this instant: one lease after the handler returned. The
    /// keeper renews the lease for as long as the attempt lives, so the lease alone bounds
    /// nothing.
    give_up: Option<Instant>,
    /// Where a stored result is kept for replays, if the handle has a cache.
    replay_cache: Option<ReplayCache>,
    /// Seals what is stored, if the handle encrypts.
    key_ring: Option<Arc<KeyRing>>,
    /// The duplicates of this process that may wait for this attempt: woken once its record is
    /// settled.
    waiters: Option<Arc<Waiters>>,
}

/// What the lease keeper knows about the lease, shared with the attempt.
#[derive(Debug)]
struct Held {
    /// A renewal was refused: another attempt took the operation over (or the record is gone).
    fenced: AtomicBool,
    /// The lease cannot have ended before this instant (measured before the claim or the last
    /// renewal was sent, plus the lease's length).
    until: Mutex<Instant>,
    /// Held by the keeper while a renewal is on its way, and set once the attempt settles its
    /// record: no renewal starts after that, and none is still in flight, which could land after
    /// an abandon and revive the lease it ended (retries would wait with 409 for another lease).
    stopped: tokio::sync::Mutex<bool>,
}

impl Held {
    fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn renewed(&self, until: Instant) {
        let mut held = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *held = (*held).max(until);
    }

    /// Stops the keeper's renewals, once the one in flight (if any) has returned. The keeper must
    /// be polled meanwhile (or not exist), or this waits for ever.
    async fn stop_renewing(&self) {
        *self.stopped.lock().await = true;
    }
}

impl Attempt {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        lease: Lease,
        settings: ClaimSettings,
        wait: Duration,
        sent: Instant,
    ) -> Self {
        let held = Held {
            fenced: AtomicBool::new(false),
            until: Mutex::new(sent + settings.lease),
            stopped: tokio::sync::Mutex::new(false),
        };
        // Down again when the attempt is dropped, whatever became of it.
        telemetry::in_flight(&lease.key, store.backend(), 1.0);
        Attempt {
            store,
            lease,
            settings,
            wait,
            armed: true,
            held: Arc::new(held),
            give_up: None,
            replay_cache: None,
            key_ring: None,
            waiters: None,
        }
    }

    /// Keeps the result, once stored, in `cache`
    /// ([`Idem::with_replay_cache`](super::Idem::with_replay_cache)).
    pub(crate) fn with_replay_cache(mut self, cache: Option<ReplayCache>) -> Self {
        // A remembered key's lease ends with its remember window, not its TTL: the cache would
        // know the response's end only from the record, which a claim reads back.
        self.replay_cache = cache.filter(|_| self.settings.remember.is_none());
        self
    }

    pub(crate) fn with_key_ring(mut self, ring: Option<Arc<KeyRing>>) -> Self {
        self.key_ring = ring;
        self
    }

    /// Holds the key among `waiters`, so that duplicates of this process wait for this
    /// attempt without polling the store, and wakes them once its record is settled.
    pub(crate) fn with_waiters(mut self, waiters: Arc<Waiters>) -> Self {
        waiters.hold(&self.lease.key);
        self.waiters = Some(waiters);
        self
    }

    /// `completion` as the store keeps it: sealed under the key ring's primary key, if any. A
    /// seal that cannot be made (no randomness for its nonce) fails like a store error.
    fn stored<'c>(&self, completion: &'c Completion) -> Result<Cow<'c, Completion>, StoreError> {
        match &self.key_ring {
            Some(ring) if ring.seals() => ring
                .seal(
                    &self.lease.key.hash_hex().to_string(),
                    &self.lease.operation_id,
                    &self.lease.request_hash,
                    completion,
                )
                .map(Cow::Owned)
                .map_err(|e| StoreError::Other(format!("no randomness to seal with: {e}").into())),
            _ => Ok(Cow::Borrowed(completion)),
        }
    }

    /// The operation id handed to the handler.
    fn operation(&self) -> OperationId {
        OperationId::new(&self.lease.operation_id, self.lease.took_over, true)
    }

    /// Runs `handler` and settles the record through `front`; the lease is renewed every
    /// `lease / 2` meanwhile, from the handler's first poll until the record is settled.
    ///
    /// * The handler runs with the operation id in scope, in an `idempotent` span, for at most
    ///   the timeout: then its future is dropped, the record abandoned, and the caller gets
    ///   [`IdempotencyError::TimedOut`].
    /// * A completion refused by the store for the moment is retried with backoff while the
    ///   lease is held, for at most one lease after the handler returned; a completion that
    ///   cannot be stored (refused for good, or past that bound) ends the lease at once and
    ///   keeps the operation id: the next retry runs the handler again under it, instead of
    ///   waiting with `409`.
    /// * An attempt superseded meanwhile (fenced out: its lease ran out and a retry took the
    ///   operation over) stores nothing and answers what a retry would see — the stored result of
    ///   the attempt that took over, or `409` while it runs — so that its client is never told
    ///   something that contradicts the record.
    pub(crate) async fn drive<Fr, H>(
        mut self,
        mut front: Fr,
        handler: H,
        client_key: &str,
    ) -> Fr::Answer
    where
        Fr: Front,
        H: Future<Output = Fr::Out>,
    {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            target: "idem",
            "idempotent",
            operation = self.lease.key.operation(),
            key_hash = %self.lease.key.hash_hex(),
            operation_id = %self.lease.operation_id,
            fence = self.lease.fence,
            took_over = self.lease.took_over,
            ttl = ?self.settings.ttl,
            // Absent from the span unless the handler remembers keys.
            remember = self.settings.remember.map(tracing::field::debug),
        );
        if self.lease.took_over {
            span.in_scope(|| {
                tracing::debug!(
                    target: "idem",
                    fence = self.lease.fence,
                    "took over an attempt whose lease ended: the operation continues under its \
                     operation id"
                );
            });
        }
        let handler = with_operation(self.operation(), handler).instrument(span);
        let atomic = front.atomic();
        if let Some(atomic) = &atomic
            && let Err(e) = self.begin(&**atomic).await
        {
            return front.reject(
                IdempotencyError::Unavailable {
                    retry_after: e.retry_after().unwrap_or(DEFAULT_RETRY_AFTER),
                },
                Some(client_key),
            );
        }
        let started = std::time::Instant::now();
        if tokio::runtime::Handle::try_current().is_err() {
            // No timer, no background renewal: run it, settle once.
            let out = handler.await;
            self.ran(started);
            let (settlement, answer) = front.settle(out).await;
            if let Some(atomic) = &atomic {
                return Box::pin(
                    self.settle_atomic(&**atomic, settlement, front, answer, client_key),
                )
                .await;
            }
            let _ = self.carry_out(settlement).await;
            return answer;
        }
        let mut keeper = Box::pin(keep_lease(
            self.store.clone(),
            self.lease.clone(),
            self.settings.lease,
            self.wait,
            self.held.clone(),
        ));
        let timeout = self.settings.timeout;
        // The handler's future is dropped at the end of this statement, before the record is
        // abandoned when it timed out.
        let out = tokio::select! {
            biased;
            out = tokio::time::timeout(timeout, handler) => out,
            never = &mut keeper => match never {},
        };
        self.ran(started);
        let Ok(out) = out else {
            if let Some(atomic) = &atomic {
                // Before the record is abandoned: on SQLite the open transaction holds the write
                // lock that abandoning needs.
                atomic.rollback().await;
            }
            tokio::select! {
                biased;
                () = self.timed_out(timeout) => {}
                never = &mut keeper => match never {},
            }
            return front.reject(
                IdempotencyError::TimedOut { after: timeout },
                Some(client_key),
            );
        };
        let (settlement, answer) = tokio::select! {
            biased;
            settled = front.settle(out) => settled,
            never = &mut keeper => match never {},
        };
        if let Some(atomic) = &atomic {
            return tokio::select! {
                biased;
                // Boxed, like the other settlement of the atomic mode: the two-commit mode's
                // attempts do not carry its state.
                answer = Box::pin(self.settle_atomic(&**atomic, settlement, front, answer, client_key)) => answer,
                never = &mut keeper => match never {},
            };
        }
        let stored = match settlement {
            Settlement::Store(completion) => {
                let first = tokio::select! {
                    biased;
                    first = self.complete_once(&completion) => first,
                    never = &mut keeper => match never {},
                };
                match first {
                    Err(e) if e.is_transient() && self.may_retry(FIRST_COMPLETION_BACKOFF) => {
                        // The store refused for the moment: answer now, and keep storing (and
                        // renewing the lease, so that retries wait with 409) in the background.
                        self.complete_in_background(completion, keeper, e);
                        return answer;
                    }
                    first => tokio::select! {
                        biased;
                        stored = self.stored_or_abandoned(first) => stored,
                        never = &mut keeper => match never {},
                    },
                }
            }
            // The keeper stays polled while the record is settled: it must finish a renewal in
            // flight before the lease may end (`Held::stop_renewing`).
            other => tokio::select! {
                biased;
                settled = self.carry_out(other) => settled,
                never = &mut keeper => match never {},
            },
        };
        self.answer_settled(stored, front, answer, client_key).await
    }

    /// Concludes the attempt once its record is settled (or left for a takeover): disarms it,
    /// counts the settlement (`done` when `result` is `Ok`, fenced out or failed otherwise), and
    /// reports a failure as `what`.
    fn conclude(
        &mut self,
        what: &str,
        done: Settled,
        result: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.armed = false;
        let settled = match &result {
            Ok(()) => done,
            Err(StoreError::FencedOut { .. }) => Settled::FencedOut,
            Err(_) => Settled::Failed,
        };
        telemetry::settled(&self.lease.key, self.store.backend(), settled);
        if let Err(e) = &result {
            self.report(what, e);
        }
        result
    }

    /// Records how long the handler ran; completions are tried for one lease from now.
    fn ran(&mut self, started: std::time::Instant) {
        telemetry::handler(&self.lease.key, self.store.backend(), started.elapsed());
        self.give_up = Some(Instant::now() + self.settings.lease);
    }

    /// Notes the end of a completion. One the store did not take (refused for good, or for
    /// longer than the retries' bound) ends the lease at once: the record keeps its operation
    /// id — the handler ran, its effects may exist under that id — and nothing is deleted, so
    /// the next retry takes the operation over at once and runs the handler again under the
    /// same id (S22), where a lease left to run out would keep every retry at `409` meanwhile.
    async fn stored_or_abandoned(
        &mut self,
        stored: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let Err(e) = &stored else {
            return self.conclude("result not stored", Settled::Stored, stored);
        };
        if matches!(e, StoreError::FencedOut { .. }) {
            return self.conclude("result not stored", Settled::Stored, stored);
        }
        self.armed = false;
        telemetry::settled(&self.lease.key, self.store.backend(), Settled::Failed);
        tracing::error!(
            target: "idem",
            operation = self.lease.key.operation(),
            key_hash = %self.lease.key.hash_hex(),
            operation_id = %self.lease.operation_id,
            error = %Chain(e),
            "result not stored; the lease ends now, and a retry runs the handler again under the \
             same operation id"
        );
        if let Err(abandoned) = self.abandon().await
            && !matches!(abandoned, StoreError::FencedOut { .. })
        {
            self.report("lease not ended", &abandoned);
        }
        stored
    }

    /// Retries the completion `first` refused, on a task of its own that also keeps renewing the
    /// lease, while the caller gets its answer. Dropped with its runtime, it abandons the record
    /// like any unsettled attempt.
    fn complete_in_background<K>(mut self, completion: Completion, mut keeper: K, first: StoreError)
    where
        K: Future<Output = Infallible> + Send + Unpin + 'static,
    {
        tracing::debug!(
            target: "idem",
            operation = self.lease.key.operation(),
            key_hash = %self.lease.key.hash_hex(),
            error = %Chain(&first),
            "storing the result failed for the moment; answering now and trying again in the \
             background while the lease is held"
        );
        tokio::spawn(async move {
            let stored = tokio::select! {
                biased;
                stored = self.complete(&completion, FIRST_COMPLETION_BACKOFF) => stored,
                never = &mut keeper => match never {},
            };
            tokio::select! {
                biased;
                _ = self.stored_or_abandoned(stored) => {}
                never = &mut keeper => match never {},
            }
        });
    }

    /// Stores, releases or abandons the record, without waiting between tries (no timer outside
    /// a tokio runtime).
    async fn carry_out(&mut self, settlement: Settlement) -> Result<(), StoreError> {
        match settlement {
            Settlement::Store(completion) => {
                let stored = self.complete_once(&completion).await;
                self.stored_or_abandoned(stored).await
            }
            Settlement::Release => self.release_or_abandon().await,
            Settlement::Abandon => {
                let abandoned = self.abandon().await;
                self.conclude("lease not ended", Settled::Abandoned, abandoned)
            }
        }
    }

    /// One try at storing the snapshot (fenced out at once when a renewal already found the lease
    /// taken over). The store accepts the completion whenever fence and operation id are still
    /// the record's, so a late completion nobody superseded is never lost. No renewal is in
    /// flight meanwhile, and none starts once it is stored: a renewal refused because the
    /// record is completed would read as a takeover. The keeper must be polled meanwhile (see
    /// [`Held::stop_renewing`]).
    async fn complete_once(&self, completion: &Completion) -> Result<(), StoreError> {
        let mut stopped = self.held.stopped.lock().await;
        if self.fenced_out() {
            return Err(self.fenced_error());
        }
        let sealed = self.stored(completion)?;
        let call = bounded(self.wait, self.store.complete(&self.lease, &sealed));
        let stored = telemetry::store_call(self.store.backend(), "complete", call).await;
        // Once stored, no renewal starts; a failed try leaves the flag as it was.
        if stored.is_ok() {
            *stopped = true;
        }
        if let (Ok(()), Some(cache)) = (&stored, &self.replay_cache) {
            cache.insert_completed(&self.lease, completion, self.store.clock());
        }
        stored
    }

    /// Stores the snapshot, retrying what the store refuses for the moment (a busy database, a
    /// deadlock victim, a dropped connection, a pool timeout, no answer in time) with doubling
    /// waits, starting at `wait`, while the lease is held and for at most one lease after the
    /// handler returned.
    async fn complete(
        &self,
        completion: &Completion,
        mut wait: Duration,
    ) -> Result<(), StoreError> {
        loop {
            tokio::time::sleep(wait).await;
            telemetry::completion_retry(&self.lease.key, self.store.backend());
            let next = (wait * 2).min(MAX_COMPLETION_BACKOFF);
            match self.complete_once(completion).await {
                // Checked against the wait before the next try, so that no try starts past the
                // bound.
                Err(e) if e.is_transient() && self.may_retry(next) => {
                    tracing::debug!(
                        target: "idem",
                        operation = self.lease.key.operation(),
                        key_hash = %self.lease.key.hash_hex(),
                        error = %Chain(&e),
                        "storing the result failed for the moment; trying again"
                    );
                    wait = next;
                }
                result => return result,
            }
        }
    }

    /// `true` when the lease is held for longer than `wait`, the retries' bound is further
    /// away than `wait`, and the runtime has a timer.
    fn may_retry(&self, wait: Duration) -> bool {
        let next = Instant::now() + wait;
        tokio::runtime::Handle::try_current().is_ok()
            && next < self.held.until()
            && self.give_up.is_none_or(|bound| next < bound)
    }

    /// Settles an outcome the policy declares effect-free (the operation never started, S2).
    ///
    /// The record is deleted only when this attempt created the operation: a retry then runs as
    /// a new operation, under a new operation id, which is harmless because nothing was done
    /// under the old one. An attempt that took the operation over cannot say so — the attempt
    /// before it may have done part of the work under the operation id before its client went
    /// away, and this attempt's "never started" (a downstream's `409` "still processing", say)
    /// describes only its own run — so the record keeps its operation id and the lease ends,
    /// as for any outcome that is not final: the next retry continues the same operation (S25).
    async fn release_or_abandon(&mut self) -> Result<(), StoreError> {
        self.held.stop_renewing().await;
        if self.lease.took_over {
            let abandoned = self.abandon().await;
            return self.conclude("lease not ended", Settled::Abandoned, abandoned);
        }
        let released = if self.fenced_out() {
            Err(self.fenced_error())
        } else {
            let call = bounded(self.wait, self.store.release(&self.lease));
            telemetry::store_call(self.store.backend(), "release", call).await
        };
        self.conclude("record not released", Settled::Released, released)
    }

    /// Ends the lease, keeping the record and its operation id: the retry takes over at once.
    /// The keeper's renewals stop first (it must be polled meanwhile, see
    /// [`Held::stop_renewing`]), so that none lands after the lease ended.
    async fn abandon(&self) -> Result<(), StoreError> {
        self.held.stop_renewing().await;
        if self.fenced_out() {
            return Err(self.fenced_error());
        }
        let call = bounded(self.wait, self.store.abandon(&self.lease));
        telemetry::store_call(self.store.backend(), "abandon", call).await
    }

    async fn timed_out(&mut self, after: Duration) {
        tracing::warn!(
            target: "idem",
            operation = self.lease.key.operation(),
            key_hash = %self.lease.key.hash_hex(),
            operation_id = %self.lease.operation_id,
            timeout = ?after,
            "the handler ran past its timeout and was stopped; a retry continues the operation \
             under the same operation id"
        );
        let abandoned = self.abandon().await;
        let _ = self.conclude("lease not ended", Settled::TimedOut, abandoned);
    }

    /// The caller's answer once the record is settled (`settled`, what the store said): the
    /// attempt's own `answer`, or, when it was fenced out (superseded while it ran), what a retry
    /// of the same request sees now ([`Attempt::superseded`]).
    async fn answer_settled<Fr: Front>(
        &self,
        settled: Result<(), StoreError>,
        front: Fr,
        answer: Fr::Answer,
        client_key: &str,
    ) -> Fr::Answer {
        match settled {
            Err(StoreError::FencedOut { .. }) => self.superseded(front, answer, client_key).await,
            _ => answer,
        }
    }

    /// The answer of an attempt fenced out while it ran: what a retry of the same request sees
    /// now, or the attempt's own answer when the record is gone (nothing then contradicts it).
    /// A record this handle cannot open (sealed under a key its ring lacks: a rolling
    /// deployment that switches encryption on) answers `503 record-sealed`, as a retry through
    /// this handle would; its own answer might contradict the result the takeover stored (a
    /// failure told for a payment that succeeded). A store that cannot be read answers `503`
    /// for the same reason.
    async fn superseded<Fr: Front>(
        &self,
        front: Fr,
        own: Fr::Answer,
        client_key: &str,
    ) -> Fr::Answer {
        let (record, remembered) = match telemetry::store_call(
            self.store.backend(),
            "get",
            bounded(self.wait, self.store.get_with_now(&self.lease.key)),
        )
        .await
        {
            // Decided as a claim decides, by the store's clock: a record past its TTL is
            // remembered, never replayed (its response may be freed already).
            Ok(Some((record, now))) => {
                let remembered = record.is_remembered(now);
                let open = if remembered {
                    seal::open_remembered
                } else {
                    seal::open_record
                };
                match open(self.key_ring.as_deref(), &self.lease.key, record) {
                    Ok(record) => (record, remembered),
                    Err(e) => {
                        super::front::unopened(&self.lease.key, self.store.backend(), &e);
                        return front.reject(IdempotencyError::Sealed(e), Some(client_key));
                    }
                }
            }
            Ok(None) => return own,
            Err(e) => {
                return front.reject(
                    IdempotencyError::Unavailable {
                        retry_after: e.retry_after().unwrap_or(DEFAULT_RETRY_AFTER),
                    },
                    Some(client_key),
                );
            }
        };
        let now_claim = match record.state {
            // Another attempt holds it: at most a lease until it finishes or can be taken over.
            RecordState::Processing => Claim::InProgress {
                request_hash: record.request_hash,
                retry_after: self.settings.lease,
            },
            RecordState::Completed | RecordState::FailedStored if remembered => {
                Claim::Remembered(record)
            }
            RecordState::Completed | RecordState::FailedStored => Claim::Completed(record),
        };
        match answer(now_claim, self.lease.request_hash, client_key) {
            Answer::Replay(record) => front.replay(record).await,
            Answer::Reject(e) => front.reject(e, Some(client_key)),
        }
    }

    /// `true` once a takeover fenced this attempt out.
    fn fenced_out(&self) -> bool {
        self.held.fenced.load(Ordering::SeqCst)
    }

    fn fenced_error(&self) -> StoreError {
        StoreError::FencedOut {
            key_hash: self.lease.key.hash_hex().to_string(),
            fence: self.lease.fence,
        }
    }

    fn report(&self, what: &str, e: &StoreError) {
        let (key, operation_id) = (&self.lease.key, &self.lease.operation_id);
        match e {
            StoreError::FencedOut { .. } => tracing::warn!(
                target: "idem",
                operation = key.operation(),
                key_hash = %key.hash_hex(),
                %operation_id,
                fence = self.lease.fence,
                "{what}: the lease ran out while the handler ran and a retry took the operation \
                 over (fenced out); the attempt that took over stores its own result, and this \
                 attempt answers what that retry sees"
            ),
            e => tracing::error!(
                target: "idem",
                operation = key.operation(),
                key_hash = %key.hash_hex(),
                %operation_id,
                error = %Chain(e),
                "{what}; the record stays in progress until its lease ends, then a retry \
                 continues the operation under the same operation id"
            ),
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        telemetry::in_flight(&self.lease.key, self.store.backend(), -1.0);
        let waiters = self.waiters.take();
        if !self.armed || self.fenced_out() {
            // Settled (or superseded): a waiter's claim now sees the outcome.
            if let Some(waiters) = waiters {
                waiters.wake(&self.lease.key);
            }
            return;
        }
        // The handler may have started, and done part of its work under the operation id: keep
        // the record (never delete it here) and end the lease so that the retry continues at
        // once. Fenced by fence + operation id, so it cannot touch a record that was completed
        // meanwhile or that another attempt holds. The keeper is dropped with the request: a
        // renewal it had already sent may still land after this abandon and give the lease one
        // more length, after which a retry takes over as usual (settlements that the attempt
        // carries out itself stop the keeper first, `Held::stop_renewing`).
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            let lease = self.lease.clone();
            let wait = self.wait;
            handle.spawn(async move {
                let call = bounded(wait, store.abandon(&lease));
                let abandoned = telemetry::store_call(store.backend(), "abandon", call).await;
                // The lease is ended: a waiter's claim takes the operation over.
                if let Some(waiters) = waiters {
                    waiters.wake(&lease.key);
                }
                if let Err(e) = abandoned
                    && !matches!(e, StoreError::FencedOut { .. })
                {
                    tracing::warn!(
                        target: "idem",
                        operation = lease.key.operation(),
                        key_hash = %lease.key.hash_hex(),
                        operation_id = %lease.operation_id,
                        error = %Chain(&e),
                        "the request ended before its result was stored, and its lease could \
                         not be ended: a retry continues the operation once the lease runs out"
                    );
                }
            });
        } else if let Some(waiters) = waiters {
            // Nothing to spawn on: the lease runs out on its own. End the hold all the same.
            waiters.wake(&self.lease.key);
        }
    }
}

/// Renews `lease` by `lease_len` every `lease_len / 2` (at least every millisecond) until dropped;
/// a refused renewal (fenced out) sets `held.fenced` and stops renewing. A renewal that fails for
/// the moment is retried at the next tick.
async fn keep_lease(
    store: Arc<dyn Store>,
    mut lease: Lease,
    lease_len: Duration,
    wait: Duration,
    held: Arc<Held>,
) -> Infallible {
    let period = (lease_len / 2).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        // Held until the renewal has returned: the attempt settles its record only after that.
        let stopped = held.stopped.lock().await;
        if *stopped {
            drop(stopped);
            return core::future::pending().await;
        }
        let sent = Instant::now();
        let call = bounded(wait, store.extend(&lease, lease_len));
        match telemetry::store_call(store.backend(), "extend", call).await {
            Ok(renewed) => {
                lease = renewed;
                held.renewed(sent + lease_len);
            }
            Err(StoreError::FencedOut { .. }) => {
                tracing::warn!(
                    target: "idem",
                    operation = lease.key.operation(),
                    key_hash = %lease.key.hash_hex(),
                    operation_id = %lease.operation_id,
                    fence = lease.fence,
                    "lease lost while the handler runs: a retry took the operation over; this \
                     attempt's result will not be stored"
                );
                held.fenced.store(true, Ordering::SeqCst);
                drop(stopped);
                return core::future::pending().await;
            }
            Err(e) => tracing::debug!(
                target: "idem",
                operation = lease.key.operation(),
                key_hash = %lease.key.hash_hex(),
                error = %Chain(&e),
                "lease renewal failed; retried at the next tick"
            ),
        }
    }
}
