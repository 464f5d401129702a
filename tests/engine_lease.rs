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

/// Records every `tracing` event (level, target, fields) of the thread it is the default of.
#[derive(Clone, Default)]
struct Events(Arc<std::sync::Mutex<Vec<String>>>);

impl Events {
    fn matching(&self, needle: &str) -> Vec<String> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|e| e.contains(needle))
            .cloned()
            .collect()
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let meta = event.metadata();
        let mut text = format!("{} {}", meta.level(), meta.target());
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                text.push_str(&format!(" {}={value:?}", field.name()));
            },
        );
        self.0.lock().unwrap().push(text);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(flavor = "current_thread")]
async fn superseded_attempt_is_answered_but_not_stored() {
    // One thread: the events of every task of this test reach this subscriber.
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());
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
    // Nobody's answer says the zombie's result was dropped: the log does, with its key.
    let lost = events.matching("lease lost");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0].starts_with("WARN idem") && lost[0].contains("k-fenced"),
        "{lost:?}"
    );
    let dropped = events.matching("result not stored");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert!(dropped[0].contains("fenced out") && dropped[0].contains("k-fenced"));
}

static OUTAGE: HandlerConfig = HandlerConfig::new("tests::outage");

#[tokio::test(flavor = "current_thread")]
async fn a_result_the_store_cannot_take_is_answered_and_reported() {
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    let pool = store.pool().clone();
    let idem = Idem::new(store);
    let hash = RequestHash::of_bytes(b"outage");
    // The database goes away while the handler runs: its answer still reaches the caller.
    let answer = run_once::<String, Status, _>(&idem, &OUTAGE, "k-outage", &[], hash, async {
        pool.close().await;
        Ok("shipped".to_owned())
    })
    .await;
    assert_eq!(answer.unwrap(), "shipped");
    let reported = events.matching("result not stored");
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(reported[0].starts_with("ERROR idem"), "{reported:?}");
    assert!(reported[0].contains("k-outage") && reported[0].contains("stays in progress"));
    // And the claim of a retry is refused with 503, reported too.
    let retry = run_once::<String, Status, _>(&idem, &OUTAGE, "k-outage", &[], hash, async {
        Ok("again".to_owned())
    })
    .await;
    assert_eq!(retry, Err(Status(503)));
    assert_eq!(events.matching("answering 503").len(), 1);
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
