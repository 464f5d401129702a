//! `run_once`, the framework-free form (queue consumers), over real stores: memory and SQLite.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::MemoryStore;
use idem::SqliteStore;
use idem::problem;
use idem::store::Store;
use idem::{Contract, HandlerConfig, Idem, IdempotencyError, RequestHash, operation_id, run_once};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum JobError {
    Declined(String),
    /// An idempotency condition: its status and problem type.
    Idempotency(u16, String),
}

impl From<IdempotencyError> for JobError {
    fn from(e: IdempotencyError) -> Self {
        JobError::Idempotency(e.status(), e.problem_type().to_owned())
    }
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Shipped {
    shipment: String,
    operation: String,
}

static SHIP: HandlerConfig = HandlerConfig::new("tests::ship");
static SHIP_SUPPRESS: HandlerConfig =
    HandlerConfig::new("tests::ship_suppress").contract(Contract::SuppressOnly);
static SHIP_OPEN: HandlerConfig = HandlerConfig::new("tests::ship").fail_open(true);

struct Consumer {
    idem: Idem,
    runs: Arc<AtomicUsize>,
}

impl Consumer {
    fn new(store: Arc<dyn Store>) -> Self {
        Consumer {
            idem: Idem::from_arc(store),
            runs: Arc::default(),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    async fn ship(
        &self,
        cfg: &'static HandlerConfig,
        msg_id: &str,
        sku: &str,
        sleep_ms: u64,
    ) -> Result<Shipped, JobError> {
        let hash = RequestHash::of_bytes(sku.as_bytes());
        let runs = self.runs.clone();
        let sku = sku.to_owned();
        run_once(
            &self.idem,
            cfg,
            msg_id,
            &[&"warehouse-1"],
            hash,
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let op = operation_id().expect("operation id inside");
                tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
                if sku == "none" {
                    return Err(JobError::Declined("out of stock".into()));
                }
                Ok(Shipped {
                    shipment: format!("shp_{sku}"),
                    operation: op.to_string(),
                })
            },
        )
        .await
    }
}

async fn sqlite_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    (Arc::new(store), dir)
}

async fn replays_the_stored_ok_and_err(store: Arc<dyn Store>) {
    let c = Consumer::new(store);
    let first = c.ship(&SHIP, "m-1", "sku-1", 0).await.unwrap();
    let again = c.ship(&SHIP, "m-1", "sku-1", 0).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(first.operation.len(), 36);
    assert_eq!(c.runs(), 1);
    // A stored Err (exact_replay keeps failures).
    let e1 = c.ship(&SHIP, "m-2", "none", 0).await.unwrap_err();
    let e2 = c.ship(&SHIP, "m-2", "none", 0).await.unwrap_err();
    assert_eq!(e1, JobError::Declined("out of stock".into()));
    assert_eq!(e2, e1);
    assert_eq!(c.runs(), 2);
    // Another payload under a used key.
    let reused = c.ship(&SHIP, "m-1", "sku-9", 0).await.unwrap_err();
    assert_eq!(
        reused,
        JobError::Idempotency(422, problem::KEY_REUSED.into())
    );
    assert_eq!(c.runs(), 2);
}

#[tokio::test]
async fn memory_replays_the_stored_ok_and_err() {
    replays_the_stored_ok_and_err(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn sqlite_replays_the_stored_ok_and_err() {
    let (store, _dir) = sqlite_store().await;
    replays_the_stored_ok_and_err(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_progress_is_an_err() {
    let (store, _dir) = sqlite_store().await;
    let c = Arc::new(Consumer::new(store));
    let first = tokio::spawn({
        let c = c.clone();
        async move { c.ship(&SHIP, "m-busy", "sku-1", 500).await }
    });
    while c.runs() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let busy = c.ship(&SHIP, "m-busy", "sku-1", 0).await.unwrap_err();
    assert_eq!(
        busy,
        JobError::Idempotency(409, problem::IN_PROGRESS.into())
    );
    assert!(first.await.unwrap().is_ok());
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn in_progress_error_carries_retry_after() {
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Wait(Option<u64>);
    impl From<IdempotencyError> for Wait {
        fn from(e: IdempotencyError) -> Self {
            match e {
                IdempotencyError::InProgress { retry_after, .. } => {
                    Wait(Some(retry_after.as_secs()))
                }
                _ => Wait(None),
            }
        }
    }
    let idem = Idem::new(MemoryStore::new());
    let hash = RequestHash::of_bytes(b"x");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let idem = idem.clone();
        async move {
            run_once::<u8, Wait, _>(&idem, &SHIP, "m-wait", &[], hash, async move {
                let _ = rx.await;
                Ok(1)
            })
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let busy = run_once::<u8, Wait, _>(&idem, &SHIP, "m-wait", &[], hash, async { Ok(2) }).await;
    let wait = busy.unwrap_err().0.expect("InProgress");
    assert!((1..=30).contains(&wait), "{wait}");
    tx.send(()).unwrap();
    assert_eq!(holder.await.unwrap().ok(), Some(1));
}

#[tokio::test]
async fn errors_are_released_under_suppress_only() {
    let c = Consumer::new(Arc::new(MemoryStore::new()));
    assert!(c.ship(&SHIP_SUPPRESS, "m-s", "none", 0).await.is_err());
    assert!(c.ship(&SHIP_SUPPRESS, "m-s", "none", 0).await.is_err());
    assert_eq!(c.runs(), 2, "a failure is not stored under suppress_only");
    assert!(c.ship(&SHIP_SUPPRESS, "m-s2", "sku-1", 0).await.is_ok());
    assert!(c.ship(&SHIP_SUPPRESS, "m-s2", "sku-1", 0).await.is_ok());
    assert_eq!(c.runs(), 3);
}

#[tokio::test]
async fn store_unavailable_fails_closed_or_open() {
    // A real SQLite store whose pool is closed: every claim fails.
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    sqlite.migrate().await.unwrap();
    sqlite.pool().close().await;
    let c = Consumer::new(Arc::new(sqlite));
    let down = c.ship(&SHIP, "m-down", "sku-1", 0).await.unwrap_err();
    assert_eq!(
        down,
        JobError::Idempotency(503, problem::STORE_UNAVAILABLE.into())
    );
    assert_eq!(c.runs(), 0);
    let open = c.ship(&SHIP_OPEN, "m-down", "sku-1", 0).await.unwrap();
    assert_eq!(open.operation.len(), 36);
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn invalid_key_is_an_err() {
    let store = Arc::new(MemoryStore::new());
    let c = Consumer::new(store.clone());
    let long = "m".repeat(256);
    // Empty, too long, control characters (C0, DEL, C1): refused before the store is asked.
    for key in ["", &long, "a\nb", "a\0b", "a\u{7f}b", "a\u{85}b", "\u{9f}"] {
        let e = c.ship(&SHIP, key, "sku-1", 0).await.unwrap_err();
        assert_eq!(
            e,
            JobError::Idempotency(400, problem::INVALID_KEY.into()),
            "{key:?}"
        );
    }
    assert_eq!(c.runs(), 0);
    assert!(store.is_empty(), "{} records stored", store.len());
    // 255 characters, any of them printable, are a key.
    let ok = "é".repeat(255);
    assert!(c.ship(&SHIP, &ok, "sku-1", 0).await.is_ok());
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn unreadable_stored_result_is_a_snapshot_error() {
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct E(u16);
    impl From<IdempotencyError> for E {
        fn from(e: IdempotencyError) -> Self {
            E(e.status())
        }
    }
    let idem = Idem::new(MemoryStore::new());
    let hash = RequestHash::of_bytes(b"v");
    let stored: Result<String, E> = run_once(&idem, &SHIP, "m-type", &[], hash, async {
        Ok("text".to_owned())
    })
    .await;
    assert!(stored.is_ok());
    // The result type changed between deploys: the stored JSON no longer fits.
    let read: Result<u64, E> = run_once(&idem, &SHIP, "m-type", &[], hash, async { Ok(5) }).await;
    assert_eq!(read.unwrap_err().0, 503);
}

/// The first attempt's operation id, recorded by the handler, and whether it took over.
#[derive(Clone, Default)]
struct Ops(Arc<std::sync::Mutex<Vec<(String, bool)>>>);

impl Ops {
    fn record(&self) {
        let op = operation_id().unwrap();
        self.0
            .lock()
            .unwrap()
            .push((op.to_string(), op.took_over()));
    }

    fn seen(&self) -> Vec<(String, bool)> {
        self.0.lock().unwrap().clone()
    }
}

async fn attempt(
    idem: &Idem,
    cfg: &'static HandlerConfig,
    ops: &Ops,
    sleep: Duration,
) -> Result<u8, JobError> {
    attempt_key(idem, cfg, "m-gone", ops, sleep).await
}

async fn attempt_key(
    idem: &Idem,
    cfg: &'static HandlerConfig,
    key: &str,
    ops: &Ops,
    sleep: Duration,
) -> Result<u8, JobError> {
    let ops = ops.clone();
    run_once(
        idem,
        cfg,
        key,
        &[&"w"],
        RequestHash::of_bytes(b"g"),
        async move {
            ops.record();
            tokio::time::sleep(sleep).await;
            Ok(1)
        },
    )
    .await
}

/// Retries until the answer is not `409` (the abandoned record is handed to a takeover in the
/// background).
async fn retry(idem: &Idem, cfg: &'static HandlerConfig, ops: &Ops) -> Result<u8, JobError> {
    for _ in 0..300 {
        match attempt(idem, cfg, ops, Duration::ZERO).await {
            Err(JobError::Idempotency(409, _)) => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            other => return other,
        }
    }
    panic!("still 409 after 3 s: the first attempt's lease was not ended");
}

async fn dropped_future_keeps_the_operation(store: Arc<dyn Store>) {
    let idem = Idem::from_arc(store);
    let ops = Ops::default();
    let gone = tokio::time::timeout(
        Duration::from_millis(100),
        attempt(&idem, &SHIP, &ops, Duration::from_secs(10)),
    )
    .await;
    assert!(gone.is_err());
    assert_eq!(retry(&idem, &SHIP, &ops).await, Ok(1));
    let seen = ops.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0].0, seen[1].0,
        "the redelivery continues the same operation"
    );
    assert!(
        !seen[0].1 && seen[1].1,
        "the redelivery took the operation over: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_dropped_future_keeps_the_operation() {
    dropped_future_keeps_the_operation(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dropped_future_keeps_the_operation() {
    let (store, _dir) = sqlite_store().await;
    dropped_future_keeps_the_operation(store).await;
}

static HUNG: HandlerConfig = HandlerConfig::new("tests::hung")
    .ttl(Duration::from_millis(400))
    .lease(Duration::from_millis(100))
    .timeout(Duration::from_millis(600));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_handler_is_stopped_and_the_retry_continues() {
    let (store, _dir) = sqlite_store().await;
    let idem = Idem::from_arc(store);
    let ops = Ops::default();
    // Hangs far beyond its timeout: stopped, answered 503 timed-out.
    let hung = attempt(&idem, &HUNG, &ops, Duration::from_secs(3600)).await;
    assert_eq!(
        hung,
        Err(JobError::Idempotency(503, problem::TIMED_OUT.into()))
    );
    // The retry continues the same operation at once.
    assert_eq!(retry(&idem, &HUNG, &ops).await, Ok(1));
    let seen = ops.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].0, seen[1].0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_handler_does_not_keep_its_record_alive() {
    let (store, _dir) = sqlite_store().await;
    let idem = Idem::from_arc(store.clone());
    let ops = Ops::default();
    let hung = attempt_key(&idem, &HUNG, "m-hung", &ops, Duration::from_secs(3600)).await;
    assert_eq!(
        hung,
        Err(JobError::Idempotency(503, problem::TIMED_OUT.into()))
    );
    // The lease renewals stopped with the handler, so the record's expiry stays within what the
    // TTL promised from the claim plus the handler's timeout and one lease (here 700 ms); past
    // that it is logically absent instead of answering 409 forever.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let key = idem::key::scoped_key(HUNG.operation().unwrap(), &[&"w"], "m-hung").unwrap();
    assert_eq!(store.get(&key).await.unwrap().map(|r| r.expire_at), None);
}

#[tokio::test]
async fn scope_and_operation_separate_keys() {
    let idem = Idem::new(MemoryStore::new());
    let hash = RequestHash::of_bytes(b"s");
    let runs = Arc::new(AtomicUsize::new(0));
    for tenant in ["a", "b", "a"] {
        let runs = runs.clone();
        let r: Result<usize, JobError> =
            run_once(&idem, &SHIP, "m-scope", &[&tenant], hash, async move {
                Ok(runs.fetch_add(1, Ordering::SeqCst))
            })
            .await;
        r.unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// With `Idem::with_encryption`, the stored result and the stored error are sealed (nothing of
/// either readable in the record) and replay as they were.
#[tokio::test]
async fn sealed_results_and_errors_replay() {
    let (store, _dir) = sqlite_store().await;
    let mut c = Consumer::new(store.clone());
    c.idem = c
        .idem
        .with_encryption(idem::seal::KeyRing::new("k1", [7; 32]).unwrap());
    let first = c.ship(&SHIP, "m-sealed", "sku-sealed", 0).await.unwrap();
    assert_eq!(
        c.ship(&SHIP, "m-sealed", "sku-sealed", 0).await.unwrap(),
        first
    );
    let declined = c.ship(&SHIP, "m-sealed-err", "none", 0).await.unwrap_err();
    assert_eq!(
        c.ship(&SHIP, "m-sealed-err", "none", 0).await.unwrap_err(),
        declined
    );
    assert_eq!(c.runs(), 2);
    for (msg, secret) in [
        ("m-sealed", "shp_sku-sealed"),
        ("m-sealed-err", "out of stock"),
    ] {
        let key = idem::key::ScopedKey::new(&["warehouse-1"], "tests::ship", msg).unwrap();
        let record = store.get(&key).await.unwrap().expect("stored");
        assert_eq!(record.headers[0].0, idem::seal::SEALED);
        let body = String::from_utf8_lossy(&record.body);
        assert!(!body.contains(secret), "{secret} readable");
        assert!(!record.key.contains(msg), "{}", record.key);
    }
}
