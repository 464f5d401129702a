//! [`Counted`]: a store that counts the engine's calls into the real store it wraps, for the
//! tests that assert how many calls a path costs (`contention`, `replay_cache`), and that can
//! refuse claims as an unreachable store would (`wait`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use idem::key::ScopedKey;
use idem::store::{
    BoxFuture, Claim, ClaimRequest, Clock, Completion, Lease, Record, Store, StoreError,
};

/// Counts `claim`, `complete` and every other call (`get`, `release`, `abandon`, `extend`,
/// `purge_expired`), then forwards it; `migrate`, `clock` and `backend` are not counted.
#[derive(Debug)]
pub struct Counted {
    inner: Arc<dyn Store>,
    claims: AtomicU64,
    completes: AtomicU64,
    others: AtomicU64,
    /// Claims fail as `Unavailable` while set.
    refusing: AtomicBool,
}

impl Counted {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Counted {
            inner,
            claims: AtomicU64::new(0),
            completes: AtomicU64::new(0),
            others: AtomicU64::new(0),
            refusing: AtomicBool::new(false),
        })
    }

    /// From now on, claims fail as an unreachable store's do (`on`), or go through again.
    #[allow(dead_code)]
    pub fn refuse_claims(&self, on: bool) {
        self.refusing.store(on, Ordering::SeqCst);
    }

    pub fn claims(&self) -> u64 {
        self.claims.load(Ordering::SeqCst)
    }

    pub fn completes(&self) -> u64 {
        self.completes.load(Ordering::SeqCst)
    }

    pub fn others(&self) -> u64 {
        self.others.load(Ordering::SeqCst)
    }

    /// Every counted call.
    pub fn calls(&self) -> u64 {
        self.claims() + self.completes() + self.others()
    }

    fn other(&self) {
        self.others.fetch_add(1, Ordering::SeqCst);
    }
}

impl Store for Counted {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        if self.refusing.load(Ordering::SeqCst) {
            return Box::pin(async {
                Err(StoreError::Unavailable {
                    source: "refused by the test".into(),
                    retry_after: Duration::from_secs(1),
                })
            });
        }
        self.inner.claim(req)
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.completes.fetch_add(1, Ordering::SeqCst);
        self.inner.complete(lease, completion)
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        self.other();
        self.inner.release(lease)
    }

    fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        self.other();
        self.inner.abandon(lease)
    }

    fn extend<'a>(
        &'a self,
        lease: &'a Lease,
        by: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        self.other();
        self.inner.extend(lease, by)
    }

    fn get<'a>(&'a self, key: &'a ScopedKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        self.other();
        self.inner.get(key)
    }

    fn get_with_now<'a>(
        &'a self,
        key: &'a ScopedKey,
    ) -> BoxFuture<'a, Result<Option<(Record, idem::store::Timestamp)>, StoreError>> {
        self.other();
        self.inner.get_with_now(key)
    }

    fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.other();
        self.inner.purge_expired(batch)
    }

    fn purge_responses(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.other();
        self.inner.purge_responses(batch)
    }

    fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.migrate()
    }

    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}
