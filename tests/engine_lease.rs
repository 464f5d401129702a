//! Leases while the handler runs: background extension, fencing of a superseded attempt, and
//! release after a panic. Real stores (memory), real time where the lease must tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::store::{ManualClock, MemoryStore, SqliteStore, Store};
use idem::{HandlerConfig, Idem, IdempotencyError, RequestHash, operation_id, run_once};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Status(u16);

impl From<IdempotencyError> for Status {
    fn from(e: IdempotencyError) -> Self {
        Status(e.status())
    }
}

static SHORT_LEASE: HandlerConfig =
    HandlerConfig::new("tests::short_lease").lease(Duration::from_millis(200));

async fn long_handler_keeps_its_lease(store: Arc<dyn Store>) {
    let idem = Idem::from_arc(store);
    let hash = RequestHash::of_bytes(b"long");
    let runs = Arc::new(AtomicUsize::new(0));
    let first = tokio::spawn({
        let (idem, runs) = (idem.clone(), runs.clone());
        async move {
            run_once::<String, Status, _>(&idem, &SHORT_LEASE, "k-long", &[], hash, async move {
                runs.fetch_add(1, Ordering::SeqCst);
                // Four leases long: without extension a retry would take it over.
                tokio::time::sleep(Duration::from_millis(800)).await;
                Ok("done".to_owned())
            })
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let retry = run_once::<String, Status, _>(&idem, &SHORT_LEASE, "k-long", &[], hash, async {
        Ok("second".to_owned())
    })
    .await;
    assert_eq!(retry, Err(Status(409)), "the lease was not extended");
    assert_eq!(first.await.unwrap().unwrap(), "done");
    let replay = run_once::<String, Status, _>(&idem, &SHORT_LEASE, "k-long", &[], hash, async {
        Ok("third".to_owned())
    })
    .await;
    assert_eq!(replay.unwrap(), "done");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_long_handler_keeps_its_lease() {
    long_handler_keeps_its_lease(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_long_handler_keeps_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    long_handler_keeps_its_lease(Arc::new(store)).await;
}

static FENCED: HandlerConfig = HandlerConfig::new("tests::fenced").lease(Duration::from_millis(60));

#[tokio::test(flavor = "current_thread")]
async fn superseded_attempt_is_answered_but_not_stored() {
    let clock = Arc::new(ManualClock::starting_now());
    let idem = Idem::new(MemoryStore::with_clock(clock.clone()));
    let hash = RequestHash::of_bytes(b"fenced");
    let (release_first, wait) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn({
        let idem = idem.clone();
        async move {
            run_once::<String, Status, _>(&idem, &FENCED, "k-fenced", &[], hash, async move {
                let op = operation_id().unwrap();
                let _ = wait.await;
                Ok(format!("first {op}"))
            })
            .await
        }
    });
    tokio::task::yield_now().await; // the first attempt claims and waits
    // Its server stalls past the lease (by the store's clock): a retry takes the operation over.
    clock.advance(Duration::from_secs(1));
    let second = run_once::<String, Status, _>(&idem, &FENCED, "k-fenced", &[], hash, async {
        let op = operation_id().unwrap();
        assert!(op.took_over());
        Ok(format!("second {op}"))
    })
    .await
    .unwrap();
    // Let the first attempt's lease renewal find out, then let it finish.
    tokio::time::sleep(Duration::from_millis(100)).await;
    release_first.send(()).unwrap();
    let first = first.await.unwrap().unwrap();
    assert!(
        first.starts_with("first "),
        "the zombie still gets its own answer"
    );
    // Same operation id across the takeover (S22/S23).
    assert_eq!(first["first ".len()..], second["second ".len()..]);
    // Only the second result was stored.
    let replay = run_once::<String, Status, _>(&idem, &FENCED, "k-fenced", &[], hash, async {
        Ok("third".to_owned())
    })
    .await;
    assert_eq!(replay.unwrap(), second);
}

static PANICS: HandlerConfig = HandlerConfig::new("tests::panics");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_releases_its_lease() {
    let idem = Idem::new(MemoryStore::new());
    let hash = RequestHash::of_bytes(b"panic");
    let crashed = tokio::spawn({
        let idem = idem.clone();
        async move {
            run_once::<String, Status, _>(&idem, &PANICS, "k-panic", &[], hash, async {
                panic!("handler bug")
            })
            .await
        }
    })
    .await;
    assert!(crashed.unwrap_err().is_panic());
    for _ in 0..200 {
        let retry = run_once::<String, Status, _>(&idem, &PANICS, "k-panic", &[], hash, async {
            Ok("ran".to_owned())
        })
        .await;
        match retry {
            Ok(s) => {
                assert_eq!(s, "ran");
                return;
            }
            Err(Status(409)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(other) => panic!("{other:?}"),
        }
    }
    panic!("the panicked attempt's lease was not released");
}
