//! The replay cache (`Idem::with_replay_cache`) over real stores: a cached replay sends nothing
//! to the store, and the cache never answers what the store would not — another request under
//! the key, an expired record, a record an operator expired (after at most `max_age`), a record
//! of another handle over the same database.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::MemoryStore;
use idem::SqliteStore;
use idem::problem;
use idem::store::{Clock, ManualClock, Store};
use idem::{HandlerConfig, Idem, IdempotencyError, ReplayCache, RequestHash, run_once};

use crate::backends::{Backend, Fixture, backend_tests, on_clocked_store};
use crate::counted::Counted;
use crate::servers::unique;

static SHIP: HandlerConfig = HandlerConfig::new("tests::cached_ship").ttl(Duration::from_secs(60));

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum JobError {
    Idempotency(u16, String),
}

impl From<IdempotencyError> for JobError {
    fn from(e: IdempotencyError) -> Self {
        JobError::Idempotency(e.status(), e.problem_type().to_owned())
    }
}

/// A consumer that ships `sku` for message `msg`: the result names the run that made it.
struct Consumer {
    idem: Idem,
    runs: Arc<AtomicUsize>,
}

impl Consumer {
    fn new(store: Arc<dyn Store>, cache: ReplayCache, runs: &Arc<AtomicUsize>) -> Self {
        Consumer {
            idem: Idem::from_arc(store).with_replay_cache(cache),
            runs: runs.clone(),
        }
    }

    async fn ship(&self, msg: &str, sku: &str) -> Result<String, JobError> {
        let runs = self.runs.clone();
        let sku = sku.to_owned();
        run_once(
            &self.idem,
            &SHIP,
            msg,
            &[&"warehouse-1"],
            RequestHash::of_bytes(sku.as_bytes()),
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(format!("shp_{sku}_run{run}"))
            },
        )
        .await
    }
}

fn cache() -> ReplayCache {
    ReplayCache::new(1000)
        .max_age(Duration::from_secs(3600))
        .clock_margin(Duration::from_secs(5))
}

async fn sqlite(clock: &Arc<ManualClock>) -> (Arc<SqliteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db"))
        .await
        .unwrap()
        .with_clock(clock.clone());
    store.migrate().await.unwrap();
    (Arc::new(store), dir)
}

async fn cached_replays_send_nothing(store: Arc<dyn Store>) {
    let counting = Counted::new(store);
    let runs = Arc::default();
    let c = Consumer::new(counting.clone(), cache(), &runs);
    let first = c.ship("m-1", "sku-1").await.unwrap();
    assert_eq!(counting.calls(), 2, "claim + complete");
    for _ in 0..3 {
        assert_eq!(c.ship("m-1", "sku-1").await.unwrap(), first);
    }
    assert_eq!(counting.calls(), 2, "replays from the cache");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Another handle (empty cache) over the same store: its first replay claims and fills.
    let other = Consumer::new(counting.clone(), cache(), &runs);
    assert_eq!(other.ship("m-1", "sku-1").await.unwrap(), first);
    assert_eq!(counting.calls(), 3);
    assert_eq!(other.ship("m-1", "sku-1").await.unwrap(), first);
    assert_eq!(counting.calls(), 3);
}

#[tokio::test]
async fn memory_cached_replays_send_nothing_to_the_store() {
    cached_replays_send_nothing(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn sqlite_cached_replays_send_nothing_to_the_store() {
    let clock = Arc::new(ManualClock::starting_now());
    let (store, _dir) = sqlite(&clock).await;
    let before = store.statement_count();
    cached_replays_send_nothing(store.clone()).await;
    // Fresh: claim + complete; the second handle's claim of a completed record: two more on
    // SQLite (docs/storage.md, "Statements per path"); the cached replays: none.
    assert_eq!(store.statement_count() - before, 4);
}

#[tokio::test]
async fn another_request_under_a_cached_key_is_still_422() {
    let counting = Counted::new(Arc::new(MemoryStore::new()));
    let runs = Arc::default();
    let c = Consumer::new(counting.clone(), cache(), &runs);
    c.ship("m-1", "sku-1").await.unwrap();
    let calls = counting.calls();
    let reused = c.ship("m-1", "sku-9").await.unwrap_err();
    assert_eq!(
        reused,
        JobError::Idempotency(422, problem::KEY_REUSED.into())
    );
    assert_eq!(counting.calls(), calls + 1, "the store decided");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_entry_near_the_records_expiry_is_not_served() {
    let clock = Arc::new(ManualClock::starting_now());
    let counting = Counted::new(Arc::new(MemoryStore::with_clock(clock.clone())));
    let runs = Arc::default();
    let c = Consumer::new(counting.clone(), cache(), &runs);
    let first = c.ship("m-1", "sku-1").await.unwrap();
    let calls = counting.calls();
    // TTL 60 s, margin 5 s: served from the cache until 55 s.
    clock.advance(Duration::from_millis(54_999));
    assert_eq!(c.ship("m-1", "sku-1").await.unwrap(), first);
    assert_eq!(counting.calls(), calls);
    // Within the margin: the store answers (the record still lives) and the cache is not
    // refilled.
    clock.advance(Duration::from_millis(1));
    assert_eq!(c.ship("m-1", "sku-1").await.unwrap(), first);
    assert_eq!(counting.calls(), calls + 1);
    assert_eq!(c.ship("m-1", "sku-1").await.unwrap(), first);
    assert_eq!(counting.calls(), calls + 2);
    // Past the TTL: the key is free, the job runs again.
    clock.advance(Duration::from_secs(5));
    let again = c.ship("m-1", "sku-1").await.unwrap();
    assert_ne!(again, first);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_cache_holds_at_most_its_capacity() {
    let counting = Counted::new(Arc::new(MemoryStore::new()));
    let runs = Arc::default();
    let cache = ReplayCache::new(16);
    let c = Consumer::new(counting.clone(), cache.clone(), &runs);
    for i in 0..200 {
        c.ship(&format!("m-{i}"), "sku-1").await.unwrap();
        assert!(cache.len() <= 16, "{} entries", cache.len());
    }
    assert_eq!(cache.capacity(), 16);
    // The oldest keys were evicted: the store answers their replays.
    let calls = counting.calls();
    c.ship("m-0", "sku-1").await.unwrap();
    assert_eq!(counting.calls(), calls + 1);
    assert_eq!(runs.load(Ordering::SeqCst), 200);
}

/// Two handles, each with its own cache, over one database: two processes. On a store of the
/// test's own (SQLite's file, Redis's key prefix) a purge deletes the expired record before it
/// is used again; on the shared PostgreSQL and MariaDB tables the expired record is replaced by
/// the next claim instead (S21), since a purge there would reach other tests' records.
async fn two_handles_over_one_store_stay_correct(fx: &Fixture) {
    let (store, clock) = (fx.store.clone(), fx.clock());
    let key = &unique("cache");
    let purge = !matches!(fx.backend, Backend::Postgres | Backend::Mysql);
    let runs = Arc::default();
    let a = Consumer::new(store.clone(), cache(), &runs);
    let b = Consumer::new(store.clone(), cache(), &runs);
    let first = a.ship(key, "sku-1").await.unwrap();
    assert_eq!(b.ship(key, "sku-1").await.unwrap(), first);
    assert_eq!(
        b.ship(key, "sku-9").await.unwrap_err(),
        JobError::Idempotency(422, problem::KEY_REUSED.into())
    );
    // Both caches hold the record; the TTL passes (and the record is purged).
    clock.advance(Duration::from_secs(61));
    if purge {
        assert_eq!(store.purge_expired(100).await.unwrap(), 1);
    }
    // B runs the key afresh (another payload is a new request now); A must not replay its copy.
    let second = b.ship(key, "sku-2").await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(a.ship(key, "sku-2").await.unwrap(), second);
    assert_eq!(
        a.ship(key, "sku-1").await.unwrap_err(),
        JobError::Idempotency(422, problem::KEY_REUSED.into())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

backend_tests!(
    2,
    on_clocked_store,
    [sqlite, postgres, mysql, redis],
    two_handles_over_one_store_stay_correct,
);

/// `idem expire` ends a record early in the database: a handle with a cache replays its
/// copy for at most `max_age`, then sees the key free.
#[tokio::test]
async fn an_operator_expire_is_seen_after_max_age() {
    let clock = Arc::new(ManualClock::starting_now());
    let (store, _dir) = sqlite(&clock).await;
    let runs = Arc::default();
    let c = Consumer::new(
        store.clone(),
        cache().max_age(Duration::from_secs(2)),
        &runs,
    );
    let first = c.ship("m-1", "sku-1").await.unwrap();
    // What the CLI's `expire` does: expire_at = min(expire_at, now).
    let now = clock.now().as_millis();
    let expired = sqlx::query("UPDATE idem_idempotency_records SET expire_at = min(expire_at, ?1)")
        .bind(now)
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(expired.rows_affected(), 1);
    // Within max_age the copy is still served (the bounded staleness)...
    clock.advance(Duration::from_millis(1_999));
    assert_eq!(c.ship("m-1", "sku-1").await.unwrap(), first);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // ...and no longer after it: the store finds the key free.
    clock.advance(Duration::from_millis(1));
    let again = c.ship("m-1", "sku-1").await.unwrap();
    assert_ne!(again, first);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
