//! [`ReplayCache`]: an optional in-process cache of completed records, consulted before the claim
//! so that a replay of a record this process has already seen costs no store call.
//!
//! A stored snapshot never changes until it expires (S19–S21), so a copy of it may answer a
//! retry of the same request as the store would, as long as the copy is dropped before the
//! record expires. Three things bound what a copy may serve:
//!
//! * the record's `expire_at` is the store's time (the database server's on the SQL stores),
//!   compared here with this host's clock ([`Store::clock`](crate::store::Store::clock)): an
//!   entry stops being served [`ReplayCache::clock_margin`] before it, so that a clock of this
//!   host running behind the database's by less than the margin never serves an expired record;
//! * the operator's `idem expire --fence N` ends a record early, which no other process hears
//!   of: an entry is served for at most [`ReplayCache::max_age`] after it was filled;
//! * only the request hash of the record is served: another request under the same key falls
//!   through to the claim, which answers `422` (S7).
//!
//! Processing records are never cached, and a purge deletes only expired records, which the
//! cache has already dropped. A `latest_state` replay still runs its lookup: the cache only
//! saves the claim that finds the record.
//!
//! The cache is sharded (a mutex per shard, taken for a map lookup or insert), bounded by a
//! number of entries, and evicts the oldest insert of a full shard.

use core::fmt;
use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fingerprint::RequestHash;
use crate::key::ScopedKey;
use crate::store::{Clock, Completion, Lease, Record, RecordState, Timestamp};

/// Default of [`ReplayCache::max_age`]: 5 seconds.
pub const DEFAULT_REPLAY_CACHE_MAX_AGE: Duration = Duration::from_secs(5);

/// Default of [`ReplayCache::clock_margin`]: 5 seconds.
pub const DEFAULT_REPLAY_CACHE_CLOCK_MARGIN: Duration = Duration::from_secs(5);

const SHARDS: usize = 16;

/// An in-process cache of completed records for replays, set on the handle with
/// [`Idem::with_replay_cache`](super::Idem::with_replay_cache). Cheap to clone: clones share the
/// entries.
///
/// It is filled when a claim finds a completed record and when this process stores a result,
/// and consulted before the claim: a retry of the same request under a cached key is replayed
/// without a store call. Entries are served until the earliest of the record's expiry minus
/// [`ReplayCache::clock_margin`] and their insertion plus [`ReplayCache::max_age`] (the longest
/// an operator's `idem expire` may go unseen), by the store's clock.
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::engine::{Idem, ReplayCache};
/// use idem_runtime::store::MemoryStore;
///
/// let cache = ReplayCache::new(10_000)
///     .max_age(Duration::from_secs(2))
///     .clock_margin(Duration::from_secs(10));
/// let idem = Idem::new(MemoryStore::new()).with_replay_cache(cache.clone());
/// assert_eq!(idem.replay_cache().map(ReplayCache::capacity), Some(10_000));
/// assert!(cache.is_empty());
/// ```
#[derive(Clone)]
pub struct ReplayCache {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    max_age: Duration,
    clock_margin: Duration,
}

#[derive(Default)]
struct Shard {
    map: HashMap<[u8; 32], Entry>,
    /// Keys in insertion order; holds each key of `map` exactly once.
    order: VecDeque<[u8; 32]>,
}

struct Entry {
    record: Record,
    /// Served while the store's clock is before this.
    until: Timestamp,
}

impl fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayCache")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .field("max_age", &self.inner.max_age)
            .field("clock_margin", &self.inner.clock_margin)
            .finish()
    }
}

impl ReplayCache {
    /// A cache of at most about `capacity` records (rounded up to a multiple of 16, the shard
    /// count; at least 16), with [`DEFAULT_REPLAY_CACHE_MAX_AGE`] and
    /// [`DEFAULT_REPLAY_CACHE_CLOCK_MARGIN`]. Each entry holds a stored snapshot, so the memory
    /// it takes is at most `capacity` times the largest snapshot (`max_snapshot_bytes`).
    ///
    /// ```
    /// use idem_runtime::engine::ReplayCache;
    /// assert_eq!(ReplayCache::new(1000).capacity(), 1008);
    /// assert_eq!(ReplayCache::new(0).capacity(), 16);
    /// ```
    pub fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        ReplayCache {
            inner: Arc::new(Inner {
                shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
                per_shard,
                max_age: DEFAULT_REPLAY_CACHE_MAX_AGE,
                clock_margin: DEFAULT_REPLAY_CACHE_CLOCK_MARGIN,
            }),
        }
    }

    /// Sets how long an entry is served after it was filled: the longest an operator's
    /// `idem expire --fence N` (which ends a record early) goes unseen by this process. Like
    /// [`ReplayCache::clock_margin`], it returns a new, empty cache: set both before sharing it.
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::ReplayCache;
    /// let cache = ReplayCache::new(100).max_age(Duration::from_millis(500));
    /// assert_eq!(cache.max_age_in_force(), Duration::from_millis(500));
    /// ```
    #[must_use]
    pub fn max_age(self, max_age: Duration) -> Self {
        self.reconfigure(|i| i.max_age = max_age)
    }

    /// Sets how long before a record's expiry (by the store's clock, the database server's on
    /// the SQL stores) its entry stops being served: more than the largest difference between
    /// this host's clock and the database's.
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::ReplayCache;
    /// let cache = ReplayCache::new(100).clock_margin(Duration::from_secs(30));
    /// assert_eq!(cache.clock_margin_in_force(), Duration::from_secs(30));
    /// ```
    #[must_use]
    pub fn clock_margin(self, margin: Duration) -> Self {
        self.reconfigure(|i| i.clock_margin = margin)
    }

    fn reconfigure(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Inner {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: self.inner.per_shard,
            max_age: self.inner.max_age,
            clock_margin: self.inner.clock_margin,
        };
        f(&mut inner);
        ReplayCache {
            inner: Arc::new(inner),
        }
    }

    /// The [`ReplayCache::max_age`] in force.
    pub fn max_age_in_force(&self) -> Duration {
        self.inner.max_age
    }

    /// The [`ReplayCache::clock_margin`] in force.
    pub fn clock_margin_in_force(&self) -> Duration {
        self.inner.clock_margin
    }

    /// The most entries the cache holds.
    pub fn capacity(&self) -> usize {
        self.inner.per_shard * SHARDS
    }

    /// The entries held, served or not (an expired entry stays until it is replaced or evicted).
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// `true` when the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry.
    ///
    /// ```
    /// use idem_runtime::engine::ReplayCache;
    /// let cache = ReplayCache::new(16);
    /// cache.clear();
    /// assert!(cache.is_empty());
    /// ```
    pub fn clear(&self) {
        for s in &self.inner.shards {
            let mut s = lock(s);
            s.map.clear();
            s.order.clear();
        }
    }

    fn shard(&self, hash: &[u8; 32]) -> MutexGuard<'_, Shard> {
        // The key hash is a SHA-256: any of its bytes picks a shard evenly.
        lock(&self.inner.shards[usize::from(hash[0]) % SHARDS])
    }

    /// The cached record of `key` for a request hashing to `hash`, if it may still be served at
    /// `clock`'s time; `None` sends the request to the store.
    pub(crate) fn get(
        &self,
        key: &ScopedKey,
        hash: &RequestHash,
        clock: &dyn Clock,
    ) -> Option<Record> {
        let now = clock.now();
        let shard = self.shard(key.hash());
        let entry = shard.map.get(key.hash())?;
        (now < entry.until && entry.record.request_hash == *hash).then(|| entry.record.clone())
    }

    /// Caches `record`, found completed by a claim of `key`, at `clock`'s time.
    pub(crate) fn insert(&self, key: &ScopedKey, record: &Record, clock: &dyn Clock) {
        if !matches!(
            record.state,
            RecordState::Completed | RecordState::FailedStored
        ) {
            return;
        }
        let now = clock.now();
        // A remembered record's response is replayed until `replay_until` only.
        let until =
            (record.replays_until() - self.inner.clock_margin).min(now + self.inner.max_age);
        if until <= now {
            return;
        }
        let mut shard = self.shard(key.hash());
        let Shard { map, order } = &mut *shard;
        let entry = Entry {
            record: record.clone(),
            until,
        };
        if let Some(old) = map.get_mut(key.hash()) {
            *old = entry;
            return;
        }
        if map.len() >= self.inner.per_shard
            && let Some(oldest) = order.pop_front()
        {
            map.remove(&oldest);
        }
        map.insert(*key.hash(), entry);
        order.push_back(*key.hash());
    }

    /// Caches the record `completion` made of the lease's record, once the store accepted it.
    pub(crate) fn insert_completed(
        &self,
        lease: &Lease,
        completion: &Completion,
        clock: &dyn Clock,
    ) {
        let now = clock.now();
        let record = Record {
            key: lease.key.readable().to_owned(),
            request_hash: lease.request_hash,
            state: completion.outcome.into(),
            operation_id: lease.operation_id.clone(),
            fence: lease.fence,
            status: Some(completion.status),
            headers: completion.headers.clone(),
            body: completion.body.clone(),
            biz_no: completion.biz_no.clone(),
            locked_at: lease.lease_until,
            lease_until: lease.lease_until,
            expire_at: completion.expire_at.unwrap_or(lease.expire_at),
            replay_until: None,
            created_at: lease.lease_until,
            updated_at: now,
            completed_at: Some(now),
        };
        self.insert(&lease.key, &record, clock);
    }
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while a shard was held leaves it consistent (every update is a single map or deque
    // call), so a poisoned shard is used as it is.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ManualClock;

    fn record(key: &ScopedKey, hash: u8, expire_at: i64) -> Record {
        Record {
            key: key.readable().to_owned(),
            request_hash: RequestHash::from_bytes([hash; 32]),
            state: RecordState::Completed,
            operation_id: "op-id".into(),
            fence: 1,
            status: Some(201),
            headers: Vec::new(),
            body: b"{}".to_vec(),
            biz_no: None,
            locked_at: Timestamp::EPOCH,
            lease_until: Timestamp::EPOCH,
            expire_at: Timestamp::from_millis(expire_at),
            replay_until: None,
            created_at: Timestamp::EPOCH,
            updated_at: Timestamp::EPOCH,
            completed_at: None,
        }
    }

    fn key(k: &str) -> ScopedKey {
        ScopedKey::new::<&str>(&[], "op", k).unwrap()
    }

    #[test]
    fn serves_only_the_same_request_hash() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cache = ReplayCache::new(16);
        let k = key("a");
        cache.insert(&k, &record(&k, 1, 1_000_000), &clock);
        assert!(
            cache
                .get(&k, &RequestHash::from_bytes([1; 32]), &clock)
                .is_some()
        );
        assert!(
            cache
                .get(&k, &RequestHash::from_bytes([2; 32]), &clock)
                .is_none()
        );
        assert!(
            cache
                .get(&key("b"), &RequestHash::from_bytes([1; 32]), &clock)
                .is_none()
        );
    }

    #[test]
    fn stops_serving_at_the_earlier_of_expiry_minus_margin_and_max_age() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let h = RequestHash::from_bytes([1; 32]);
        let k = key("a");
        // Expiry first: 10 s - 2 s margin = 8 s, before the 60 s max age.
        let cache = ReplayCache::new(16)
            .max_age(Duration::from_secs(60))
            .clock_margin(Duration::from_secs(2));
        cache.insert(&k, &record(&k, 1, 10_000), &clock);
        clock.set(Timestamp::from_millis(7_999));
        assert!(cache.get(&k, &h, &clock).is_some());
        clock.set(Timestamp::from_millis(8_000));
        assert!(cache.get(&k, &h, &clock).is_none());
        // Max age first.
        clock.set(Timestamp::from_millis(0));
        let cache = cache.max_age(Duration::from_secs(1));
        cache.insert(&k, &record(&k, 1, 10_000), &clock);
        clock.set(Timestamp::from_millis(999));
        assert!(cache.get(&k, &h, &clock).is_some());
        clock.set(Timestamp::from_millis(1_000));
        assert!(cache.get(&k, &h, &clock).is_none());
        // A record within the margin of its expiry is not cached at all.
        let cache = cache.clock_margin(Duration::from_secs(20));
        cache.insert(&k, &record(&k, 1, 10_000), &clock);
        assert!(cache.is_empty());
    }

    #[test]
    fn never_caches_processing_records() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cache = ReplayCache::new(16);
        let k = key("a");
        let mut r = record(&k, 1, 1_000_000);
        r.state = RecordState::Processing;
        cache.insert(&k, &r, &clock);
        assert!(cache.is_empty());
    }

    #[test]
    fn holds_at_most_its_capacity_and_evicts_the_oldest() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cache = ReplayCache::new(32);
        let keys: Vec<_> = (0..1000).map(|i| key(&format!("k{i}"))).collect();
        for k in &keys {
            cache.insert(k, &record(k, 1, 1_000_000), &clock);
            assert!(cache.len() <= cache.capacity());
        }
        assert_eq!(cache.len(), 32);
        // The last key inserted is held, the first evicted.
        let h = RequestHash::from_bytes([1; 32]);
        assert!(cache.get(&keys[999], &h, &clock).is_some());
        assert!(cache.get(&keys[0], &h, &clock).is_none());
        // Replacing an entry does not grow the cache.
        cache.insert(&keys[999], &record(&keys[999], 2, 1_000_000), &clock);
        assert_eq!(cache.len(), 32);
        assert!(
            cache
                .get(&keys[999], &RequestHash::from_bytes([2; 32]), &clock)
                .is_some()
        );
    }
}
