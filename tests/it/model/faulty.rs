//! A real store with faults injected in front of it: the store down (every call refused for the
//! moment), or its completions refused (for the moment or for good). It also counts the
//! abandons that returned, so that a walk knows when an attempt that ended in the background has
//! settled its record.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use idem::key::ScopedKey;
use idem::store::{
    BoxFuture, Claim, ClaimRequest, Clock, Completion, Lease, Record, Store, StoreError,
};

use super::contract::CompleteFault;

#[derive(Debug)]
pub struct Faulty {
    inner: Arc<dyn Store>,
    down: AtomicBool,
    complete: Mutex<CompleteFault>,
    abandons: AtomicU64,
}

impl Faulty {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Faulty {
            inner,
            down: AtomicBool::new(false),
            complete: Mutex::new(CompleteFault::None),
            abandons: AtomicU64::new(0),
        }
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub fn set_complete(&self, fault: CompleteFault) {
        *self.complete.lock().unwrap() = fault;
    }

    /// How many abandons have returned so far.
    pub fn abandons(&self) -> u64 {
        self.abandons.load(Ordering::SeqCst)
    }

    fn refused(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("injected: the store is down"));
        }
        Ok(())
    }
}

impl Store for Faulty {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            self.refused()?;
            self.inner.claim(req).await
        })
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.refused()?;
            let fault = *self.complete.lock().unwrap();
            match fault {
                CompleteFault::None => self.inner.complete(lease, completion).await,
                CompleteFault::Transient => Err(StoreError::Unavailable {
                    source: "injected: the connection dropped while the result was sent".into(),
                    retry_after: Duration::from_millis(10),
                }),
                // What a store answers, before sending, for a result over its limit.
                CompleteFault::Permanent => Err(StoreError::TooLarge {
                    bytes: completion.stored_bytes().max(1 << 20) + 1,
                    limit: 1 << 20,
                }),
            }
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.refused()?;
            self.inner.release(lease).await
        })
    }

    fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let result = match self.refused() {
                Ok(()) => self.inner.abandon(lease).await,
                Err(e) => Err(e),
            };
            self.abandons.fetch_add(1, Ordering::SeqCst);
            result
        })
    }

    fn extend<'a>(
        &'a self,
        lease: &'a Lease,
        by: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            self.refused()?;
            self.inner.extend(lease, by).await
        })
    }

    fn get<'a>(&'a self, key: &'a ScopedKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            self.refused()?;
            self.inner.get(key).await
        })
    }

    fn get_with_now<'a>(
        &'a self,
        key: &'a ScopedKey,
    ) -> BoxFuture<'a, Result<Option<(Record, idem::store::Timestamp)>, StoreError>> {
        Box::pin(async move {
            self.refused()?;
            self.inner.get_with_now(key).await
        })
    }

    fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.inner.purge_expired(batch)
    }

    fn purge_responses(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
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
