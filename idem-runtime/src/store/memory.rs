//! [`MemoryStore`]: the sharded in-process store, for tests and single-process services.

use core::ops::ControlFlow;
use core::time::Duration;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard};

use super::clock::{Clock, SystemClock};
use super::error::StoreError;
use super::interface::{
    BoxFuture, Claim, ClaimRequest, Completion, Lease, Record, RecordState, Store, new_operation_id,
};
use crate::key::ScopedKey;

/// Number of shards (a power of two); the first byte of the key hash picks one.
const SHARDS: usize = 32;

type Shard = HashMap<[u8; 32], Record>;

/// An in-memory [`Store`] with the same semantics as the SQL stores: claims, leases, fencing
/// tokens and TTL, checked by the same test suite. Records live in 32 shards, each behind its own
/// mutex, held only for a map lookup (never across an `.await`). Records vanish with the process,
/// so it only suits tests and single-process services.
///
/// Every operation is one critical section on one shard; [`Store::purge_expired`] scans the
/// shards in turn (there is no expiry index in memory) and deletes the `batch` oldest expired
/// records. Its clock is the application's ([`SystemClock`] unless [`MemoryStore::with_clock`]
/// injects another): one process, one clock.
///
/// ```
/// use std::sync::Arc;
/// use idem_runtime::store::{ManualClock, MemoryStore, Store};
/// let clock = Arc::new(ManualClock::starting_now());
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.clone()));
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shards: Box<[Mutex<Shard>]>,
    clock: Arc<dyn Clock>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on the [`SystemClock`].
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store reading `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
                clock,
            }),
        }
    }

    /// Number of records held, expired ones included (until purged).
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// `true` when no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, hash: &[u8; 32]) -> MutexGuard<'_, Shard> {
        lock(&self.inner.shards[hash[0] as usize % SHARDS])
    }

    /// Runs `f` on the record `lease` still owns: same fence and operation id, still
    /// processing. No expiry condition: a record nobody superseded is still the lease's.
    fn with_owned<T>(
        &self,
        lease: &Lease,
        f: impl FnOnce(&mut Shard, super::clock::Timestamp) -> T,
    ) -> Result<T, StoreError> {
        let now = self.inner.clock.now();
        let mut shard = self.shard(lease.key.hash());
        match shard.get(lease.key.hash()) {
            Some(r) if owned_by(r, lease) && r.state == RecordState::Processing => {
                Ok(f(&mut shard, now))
            }
            _ => Err(fenced_out(lease)),
        }
    }
}

/// `true` when `record` carries `lease`'s fence and operation id.
fn owned_by(record: &Record, lease: &Lease) -> bool {
    record.fence == lease.fence && record.operation_id == lease.operation_id
}

fn fenced_out(lease: &Lease) -> StoreError {
    StoreError::FencedOut {
        key_hash: lease.key.hash_hex().to_string(),
        fence: lease.fence,
    }
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding a shard cannot leave a record half-written (every write is one
    // `insert`/`remove`), so a poisoned lock is safe to use.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            req.validate()?;
            let now = self.inner.clock.now();
            let (lease_until, expire_at) = req.deadlines(now);
            let mut shard = self.shard(req.key.hash());
            // One lookup (one SipHash of the key) for the read and the write.
            let entry = shard.entry(*req.key.hash());
            let fresh_replay_until = req.replay_until(now);
            let (fence, operation_id, took_over, created_at, expire_at, replay_until) = match &entry
            {
                Entry::Vacant(_) => (
                    1,
                    new_operation_id()?,
                    false,
                    now,
                    expire_at,
                    fresh_replay_until,
                ),
                Entry::Occupied(found) => {
                    let r = found.get();
                    match r.decide(&req.request_hash, now).settle(r, Record::clone) {
                        ControlFlow::Break(answer) => return Ok(answer),
                        // Expired: logically absent, a new operation replaces it (S21); the fence
                        // still grows so that a zombie of the old record stays fenced out.
                        ControlFlow::Continue(r) if r.is_expired(now) => (
                            r.fence + 1,
                            new_operation_id()?,
                            false,
                            now,
                            expire_at,
                            fresh_replay_until,
                        ),
                        // Expired lease of the same request: take over (S23). Its windows run
                        // from the first claim, and never end before the new lease.
                        ControlFlow::Continue(r) => (
                            r.fence + 1,
                            r.operation_id.clone(),
                            true,
                            r.created_at,
                            r.expire_at.max(lease_until),
                            r.replay_until.map(|t| t.max(lease_until)),
                        ),
                    }
                }
            };
            let record = Record {
                key: req.key.readable().to_owned(),
                request_hash: req.request_hash,
                state: RecordState::Processing,
                operation_id: operation_id.clone(),
                fence,
                status: None,
                headers: Vec::new(),
                body: Vec::new(),
                biz_no: None,
                locked_at: now,
                lease_until,
                expire_at,
                replay_until,
                created_at,
                updated_at: now,
                completed_at: None,
            };
            entry.insert_entry(record);
            Ok(Claim::Acquired(Lease {
                key: req.key.clone(),
                request_hash: req.request_hash,
                fence,
                operation_id,
                lease_until,
                expire_at,
                took_over,
            }))
        })
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            completion.validate()?;
            let now = self.inner.clock.now();
            let mut shard = self.shard(lease.key.hash());
            match shard.get_mut(lease.key.hash()) {
                Some(r) if owned_by(r, lease) && r.state == RecordState::Processing => {
                    r.state = completion.outcome.into();
                    r.status = Some(completion.status);
                    r.headers = completion.headers.clone();
                    r.body = completion.body.clone();
                    r.biz_no = completion.biz_no.clone();
                    r.set_expiry(completion.expire_at);
                    r.updated_at = now;
                    r.completed_at = Some(now);
                    Ok(())
                }
                // This lease's own completion already landed (a retry): the first one stands.
                Some(r) if owned_by(r, lease) => Ok(()),
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Deletes the record of an attempt declared effect-free (S2), and only while this
            // lease owns it: a record taken over, completed or replaced is never deleted here.
            self.with_owned(lease, |shard, _| {
                shard.remove(lease.key.hash());
            })
        })
    }

    fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.with_owned(lease, |shard, now| {
                if let Some(r) = shard.get_mut(lease.key.hash()) {
                    r.lease_until = r.lease_until.min(now);
                    r.updated_at = now;
                }
            })
        })
    }

    fn extend<'a>(
        &'a self,
        lease: &'a Lease,
        by: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            self.with_owned(lease, |shard, now| {
                let mut renewed = lease.clone();
                if let Some(r) = shard.get_mut(lease.key.hash()) {
                    r.lease_until = now + by;
                    r.expire_at = r.expire_at.max(r.lease_until);
                    r.replay_until = r.replay_until.map(|t| t.max(r.lease_until));
                    r.updated_at = now;
                    renewed.lease_until = r.lease_until;
                    renewed.expire_at = r.expire_at;
                }
                renewed
            })
        })
    }

    fn get<'a>(&'a self, key: &'a ScopedKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move { Ok(self.get_with_now(key).await?.map(|(record, _)| record)) })
    }

    fn get_with_now<'a>(
        &'a self,
        key: &'a ScopedKey,
    ) -> BoxFuture<'a, Result<Option<(Record, super::clock::Timestamp)>, StoreError>> {
        Box::pin(async move {
            let now = self.inner.clock.now();
            Ok(self
                .shard(key.hash())
                .get(key.hash())
                .filter(|r| !r.is_expired(now))
                .map(|r| (r.clone(), now)))
        })
    }

    fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            // Deletes only records whose `expire_at` has passed: logically absent already
            // (S21). Oldest expiry first, ties by key hash, as on the SQL stores: the expired
            // records of every shard are listed, sorted, and the first `batch` deleted, each
            // re-checked under its shard's lock (a claim may have replaced it meanwhile).
            let now = self.inner.clock.now();
            let mut expired: Vec<(super::clock::Timestamp, [u8; 32])> = Vec::new();
            for shard in self.inner.shards.iter() {
                let shard = lock(shard);
                expired.extend(
                    shard
                        .iter()
                        .filter(|(_, r)| r.is_expired(now))
                        .map(|(k, r)| (r.expire_at, *k)),
                );
            }
            expired.sort_unstable();
            let mut purged = 0u64;
            for (_, key) in expired.into_iter().take(batch as usize) {
                let mut shard = self.shard(&key);
                if shard.get(&key).is_some_and(|r| r.is_expired(now)) {
                    shard.remove(&key);
                    purged += 1;
                }
            }
            Ok(purged)
        })
    }

    fn purge_responses(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            // Frees the response of remembered records past their TTL, oldest first, each
            // re-checked under its shard's lock; the record itself stays until `expire_at`.
            let now = self.inner.clock.now();
            let holds_response = |r: &Record| r.is_remembered(now) && !r.response_freed();
            let mut due: Vec<(super::clock::Timestamp, [u8; 32])> = Vec::new();
            for shard in self.inner.shards.iter() {
                let shard = lock(shard);
                due.extend(
                    shard
                        .iter()
                        .filter(|(_, r)| holds_response(r))
                        .map(|(k, r)| (r.replays_until(), *k)),
                );
            }
            due.sort_unstable();
            let mut freed = 0u64;
            for (_, key) in due.into_iter().take(batch as usize) {
                let mut shard = self.shard(&key);
                if let Some(r) = shard.get_mut(&key).filter(|r| holds_response(r)) {
                    (r.headers, r.body) = (Vec::new(), Vec::new());
                    // Negated, as the other stores mark a freed response.
                    let until = r.replays_until().as_millis();
                    r.replay_until = Some(super::clock::Timestamp::from_millis(-until));
                    freed += 1;
                }
            }
            Ok(freed)
        })
    }

    fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }
}
