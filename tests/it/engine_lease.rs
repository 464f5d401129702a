//! Leases while the handler runs: background extension, fencing of a superseded attempt, and
//! release after a panic. Real stores (memory), real time where the lease must tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::MemoryStore;
use idem::SqliteStore;
use idem::store::{ManualClock, Store};
use idem::{HandlerConfig, Idem, IdempotencyError, RequestHash, operation_id, run_once};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Status(u16);

impl From<IdempotencyError> for Status {
    fn from(e: IdempotencyError) -> Self {
        Status(e.status())
    }
}

/// A 200 ms lease, and a handler timeout well past the 800 ms handler below (the default, four
/// leases, would end it at the same millisecond as its own sleep).
static SHORT_LEASE: HandlerConfig = HandlerConfig::new("tests::short_lease")
    .lease(Duration::from_millis(200))
    .timeout(Duration::from_secs(10));

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
    /// The events matching `needle`, once there is one (up to 5 s: some are logged by a task
    /// that outlives the request).
    async fn wait_for(&self, needle: &str) -> Vec<String> {
        for _ in 0..500 {
            let found = self.matching(needle);
            if !found.is_empty() {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no event matching {needle:?} within 5 s");
    }

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
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let meta = span.metadata();
        let mut text = format!("SPAN {} {}", meta.target(), meta.name());
        span.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                text.push_str(&format!(" {}={value:?}", field.name()));
            },
        );
        self.0.lock().unwrap().push(text);
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
    // The superseded attempt's caller is told what is stored (the second attempt's result),
    // never something that contradicts it.
    let first = first.await.unwrap().unwrap();
    assert_eq!(first, second);
    // Only the second result was stored.
    let replay = run_once::<String, Status, _>(&idem, &FENCED, "k-fenced", &[], hash, async {
        Ok("third".to_owned())
    })
    .await;
    assert_eq!(replay.unwrap(), second);
    // Nobody's answer says the zombie's result was dropped: the log does, with its key's hash.
    let key_hash = idem::key::scoped_key("tests::fenced", &[], "k-fenced")
        .unwrap()
        .hash_hex()
        .to_string();
    let lost = events.matching("lease lost");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0].starts_with("WARN idem") && lost[0].contains(&key_hash),
        "{lost:?}"
    );
    let dropped = events.matching("result not stored");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert!(dropped[0].contains("fenced out") && dropped[0].contains(&key_hash));
    assert!(events.matching("k-fenced").is_empty());
}

/// A TTL of 60 s remembered for an hour, with the lease of [`FENCED`].
static FENCED_REMEMBERED: HandlerConfig = HandlerConfig::new("tests::fenced_remembered")
    .ttl(Duration::from_secs(60))
    .lease(Duration::from_millis(60))
    .remember(Duration::from_secs(3600));

/// The superseded attempt of a remembered key answers as a retry would at that moment: past the
/// TTL, `key-expired` (410), never the stored response — which the purge may have freed.
#[tokio::test(flavor = "current_thread")]
async fn superseded_attempt_of_a_remembered_key_past_its_ttl_is_key_expired() {
    // A subscriber of its own, as the other tests of the events these attempts log: a callsite
    // first met with none could be cached as uninteresting for those tests' subscribers.
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());
    let clock = Arc::new(ManualClock::starting_now());
    let store = MemoryStore::with_clock(clock.clone());
    let idem = Idem::new(store.clone());
    let hash = RequestHash::of_bytes(b"fenced");
    let (release_first, wait) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn({
        let idem = idem.clone();
        async move {
            run_once::<String, Status, _>(
                &idem,
                &FENCED_REMEMBERED,
                "k-fenced",
                &[],
                hash,
                async move {
                    let _ = wait.await;
                    Ok("first".to_owned())
                },
            )
            .await
        }
    });
    tokio::task::yield_now().await; // the first attempt claims and waits
    // Past the TTL (the lease long over), a retry takes the operation over and stores.
    clock.advance(Duration::from_secs(61));
    let second =
        run_once::<String, Status, _>(&idem, &FENCED_REMEMBERED, "k-fenced", &[], hash, async {
            Ok("second".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(second, "second");
    // Its lease over too: the key is remembered, its response freed.
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.purge_responses(10).await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    release_first.send(()).unwrap();
    assert_eq!(first.await.unwrap().unwrap_err(), Status(410));
}

#[tokio::test(flavor = "current_thread")]
async fn superseded_attempt_while_the_takeover_runs_answers_409() {
    let clock = Arc::new(ManualClock::starting_now());
    let idem = Idem::new(MemoryStore::with_clock(clock.clone()));
    let hash = RequestHash::of_bytes(b"fenced-409");
    let (release_first, wait_first) = tokio::sync::oneshot::channel::<()>();
    let (release_second, wait_second) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn({
        let idem = idem.clone();
        async move {
            run_once::<String, Status, _>(&idem, &FENCED, "k-fenced-409", &[], hash, async move {
                let _ = wait_first.await;
                Ok("first".to_owned())
            })
            .await
        }
    });
    tokio::task::yield_now().await;
    clock.advance(Duration::from_secs(1));
    let second = tokio::spawn({
        let idem = idem.clone();
        async move {
            run_once::<String, Status, _>(&idem, &FENCED, "k-fenced-409", &[], hash, async move {
                let _ = wait_second.await;
                Ok("second".to_owned())
            })
            .await
        }
    });
    // The first attempt finishes while the second still runs: it cannot store, and answers what
    // a retry sees now — in progress.
    tokio::time::sleep(Duration::from_millis(100)).await;
    release_first.send(()).unwrap();
    assert_eq!(first.await.unwrap(), Err(Status(409)));
    release_second.send(()).unwrap();
    assert_eq!(second.await.unwrap().unwrap(), "second");
}

// A short lease: the completion is retried (in the background, once the caller has its answer)
// for one lease, then given up.
static OUTAGE: HandlerConfig =
    HandlerConfig::new("tests::outage").lease(Duration::from_millis(300));

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
    // Answered at once; the completion kept trying in the background for one lease, then gave
    // up and tried to end the lease, which the database, gone, refused too.
    let reported = events.wait_for("result not stored").await;
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(reported[0].starts_with("ERROR idem"), "{reported:?}");
    let key_hash = idem::key::scoped_key("tests::outage", &[], "k-outage")
        .unwrap()
        .hash_hex()
        .to_string();
    assert!(reported[0].contains(&key_hash) && reported[0].contains("the lease ends now"));
    let not_ended = events.wait_for("lease not ended").await;
    assert!(not_ended[0].contains("stays in progress"), "{not_ended:?}");
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
async fn a_panicking_handler_ends_its_lease_and_keeps_its_operation() {
    let idem = Idem::new(MemoryStore::new());
    let hash = RequestHash::of_bytes(b"panic");
    let first_op = Arc::new(std::sync::Mutex::new(None::<String>));
    let crashed = tokio::spawn({
        let (idem, first_op) = (idem.clone(), first_op.clone());
        async move {
            run_once::<String, Status, _>(&idem, &PANICS, "k-panic", &[], hash, async move {
                *first_op.lock().unwrap() = Some(operation_id().unwrap().to_string());
                panic!("handler bug")
            })
            .await
        }
    })
    .await;
    assert!(crashed.unwrap_err().is_panic());
    let first_op = first_op
        .lock()
        .unwrap()
        .clone()
        .expect("the handler started");
    // The record is abandoned in the background: the retry takes it over long before the 30 s
    // lease would have run out, under the same operation id.
    for _ in 0..200 {
        let retry =
            run_once::<(String, bool), Status, _>(&idem, &PANICS, "k-panic", &[], hash, async {
                let op = operation_id().unwrap();
                Ok((op.to_string(), op.took_over()))
            })
            .await;
        match retry {
            Ok((op, took_over)) => {
                assert_eq!(op, first_op);
                assert!(took_over);
                return;
            }
            Err(Status(409)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(other) => panic!("{other:?}"),
        }
    }
    panic!("the panicked attempt's lease was not ended");
}

/// Releases every failure: a stand-in for a policy that reads a downstream's "still processing"
/// (`409`) as "nothing was done".
#[derive(Debug)]
struct FailuresRelease;

impl idem::OutcomePolicy for FailuresRelease {
    fn classify(&self, _: idem::Contract, status: u16) -> idem::Disposition {
        match status {
            200 => idem::Disposition::Store,
            _ => idem::Disposition::Release,
        }
    }
}

static TAKEN_OVER: HandlerConfig = HandlerConfig::new("tests::taken_over");

/// The first attempt calls a downstream under its operation id, then its client goes away (the
/// request future is dropped). The retry takes the operation over and the downstream answers
/// "still processing", which the policy releases: after a takeover that must keep the record and
/// its operation id, or the next retry runs under a new id and the downstream runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_never_releases_the_operation() {
    let idem = Idem::new(MemoryStore::new()).with_policy(FailuresRelease);
    let hash = RequestHash::of_bytes(b"taken over");
    let (started, first_op) = tokio::sync::oneshot::channel();
    let first = tokio::spawn({
        let idem = idem.clone();
        async move {
            run_once::<String, Status, _>(&idem, &TAKEN_OVER, "k-taken", &[], hash, async move {
                let _ = started.send(operation_id().unwrap().to_string());
                std::future::pending().await
            })
            .await
        }
    });
    let first_op = first_op.await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // The abandon lands in the background: until then the retry gets idem's 409.
    let mut taken_over = false;
    for _ in 0..200 {
        let second =
            run_once::<String, Status, _>(&idem, &TAKEN_OVER, "k-taken", &[], hash, async {
                let op = operation_id().unwrap();
                assert_eq!((op.to_string(), op.took_over()), (first_op.clone(), true));
                Err(Status(7)) // the downstream: "still processing"
            })
            .await;
        match second {
            Err(Status(7)) => {
                taken_over = true;
                break;
            }
            Err(Status(409)) => tokio::time::sleep(Duration::from_millis(5)).await,
            other => panic!("{other:?}"),
        }
    }
    assert!(taken_over, "the dropped attempt's lease was not ended");
    let third =
        run_once::<(String, bool), Status, _>(&idem, &TAKEN_OVER, "k-taken", &[], hash, async {
            let op = operation_id().unwrap();
            Ok((op.to_string(), op.took_over()))
        })
        .await;
    assert_eq!(third, Ok((first_op, true)), "the operation got a new id");
}

static ROLLING: HandlerConfig = HandlerConfig::new("tests::rolling");

/// A rolling deployment that switches encryption on: an attempt started on an instance without
/// the ring hangs past its lease, an instance with the ring takes the operation over and stores
/// its result, sealed. The first attempt, superseded, cannot open that result: it must answer
/// what a retry through its instance sees (`503 record-sealed`), never its own failure, which
/// would tell its client a payment failed that succeeded.
#[tokio::test(flavor = "current_thread")]
async fn a_superseded_attempt_that_cannot_open_the_result_answers_503() {
    let clock = Arc::new(ManualClock::starting_now());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let plain = Idem::from_arc(store.clone());
    let ring = idem::seal::KeyRing::new("k1", [1; 32])
        .unwrap()
        .accepting_plaintext();
    let sealing = Idem::from_arc(store).with_encryption(ring);
    let hash = RequestHash::of_bytes(b"rolling");
    let (go, gate) = tokio::sync::oneshot::channel::<()>();
    let (started, first_started) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn(async move {
        run_once::<String, Status, _>(&plain, &ROLLING, "k-rolling", &[], hash, async move {
            let _ = started.send(());
            let _ = gate.await;
            Err(Status(402)) // the card was declined, says this attempt
        })
        .await
    });
    first_started.await.unwrap();
    clock.advance(ROLLING_LEASE + Duration::from_secs(1));
    let second = run_once::<String, Status, _>(&sealing, &ROLLING, "k-rolling", &[], hash, async {
        Ok("paid".to_owned())
    })
    .await;
    assert_eq!(second, Ok("paid".to_owned()));
    let _ = go.send(());
    assert_eq!(
        first.await.unwrap(),
        Err(Status(503)),
        "its own answer contradicts the stored one"
    );
    let retry = run_once::<String, Status, _>(&sealing, &ROLLING, "k-rolling", &[], hash, async {
        Ok("ran again".to_owned())
    })
    .await;
    assert_eq!(retry, Ok("paid".to_owned()));
}

/// [`ROLLING`]'s lease: the default.
const ROLLING_LEASE: Duration = idem::HandlerConfig::DEFAULT_LEASE;

// ---------------------------------------------------------------- completions under real faults

use crate::servers;

static FAULT: HandlerConfig = HandlerConfig::new("tests::fault");

/// Runs `f` once under `FAULT` for key `key`; the handler calls `fault` just before it returns,
/// so that the completion meets the fault. Then checks that the result was stored anyway (a
/// replay returns it without running the handler) and that the store's refusal was retried.
async fn completion_survives<F, Fut>(idem: &Idem, key: &str, fault: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());
    let hash = RequestHash::of_bytes(b"fault");
    let runs = Arc::new(AtomicUsize::new(0));
    let first = run_once::<String, Status, _>(idem, &FAULT, key, &[], hash, {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            fault().await;
            Ok("done".to_owned())
        }
    })
    .await;
    assert_eq!(first.unwrap(), "done");
    let retried = events.matching("storing the result failed for the moment");
    assert!(
        !retried.is_empty(),
        "the fault never reached the completion"
    );
    // The caller was answered at once; the completion lands in the background, and until then a
    // retry waits with 409 (the lease is still renewed), or 503 while the store is blocked.
    let mut replay = Err(Status(409));
    for _ in 0..500 {
        replay = run_once::<String, Status, _>(idem, &FAULT, key, &[], hash, async {
            Ok("ran again".to_owned())
        })
        .await;
        // 409 while the attempt holds its lease; 503 while the fault still blocks the store.
        if !matches!(replay, Err(Status(409 | 503))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(replay.unwrap(), "done", "the completion was not stored");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(events.matching("result not stored").is_empty());
}

/// The hash of `key`'s record, as the stores key it.
fn key_hash(key: &str) -> Vec<u8> {
    idem::key::scoped_key(FAULT.operation().unwrap(), &[], key)
        .unwrap()
        .hash()
        .to_vec()
}

#[tokio::test(flavor = "current_thread")]
async fn sqlite_completion_outlasts_a_writer_holding_the_lock() {
    use sqlx::Connection as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let options = SqliteStore::options(&path).busy_timeout(Duration::from_millis(50));
    let store = SqliteStore::connect_with(options).await.unwrap();
    store.migrate().await.unwrap();
    // Another process's writer, on a connection of its own.
    let mut writer = sqlx::SqliteConnection::connect_with(&SqliteStore::options(&path))
        .await
        .unwrap();
    completion_survives(&Idem::new(store), "k-sqlite-busy", move || async move {
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut writer)
            .await
            .unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
        });
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_completion_outlasts_a_locked_row() {
    use sqlx::Connection as _;
    let Some(url) = servers::server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    // The store gives up on a lock after 100 ms (55P03, transient).
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_with(options.options([("lock_timeout", "100ms")]))
        .await
        .unwrap();
    let store = idem::PostgresStore::from_pool(pool);
    store.migrate().await.unwrap();
    let key = servers::unique("pg-locked");
    let hash = key_hash(&key);
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    completion_survives(&Idem::new(store), &key, move || async move {
        sqlx::query("BEGIN").execute(&mut other).await.unwrap();
        sqlx::query("SELECT 1 FROM idem.idempotency_records WHERE key_hash = $1 FOR UPDATE")
            .bind(hash)
            .execute(&mut other)
            .await
            .unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            sqlx::query("COMMIT").execute(&mut other).await.unwrap();
        });
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_completion_outlasts_a_terminated_backend() {
    use sqlx::Connection as _;
    let Some(url) = servers::server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    let name = servers::unique("idem_terminated");
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_with(options.application_name(&name))
        .await
        .unwrap();
    let store = idem::PostgresStore::from_pool(pool);
    store.migrate().await.unwrap();
    let key = servers::unique("pg-terminated");
    let hash = key_hash(&key);
    let mut locker = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    completion_survives(&Idem::new(store), &key, move || async move {
        // The completion will wait on this row lock: its backend is then terminated while the
        // statement runs, a real mid-statement loss of the connection.
        sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
        sqlx::query("SELECT 1 FROM idem.idempotency_records WHERE key_hash = $1 FOR UPDATE")
            .bind(hash)
            .execute(&mut locker)
            .await
            .unwrap();
        tokio::spawn(async move {
            loop {
                let killed: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1 AND wait_event_type = 'Lock') t",
                )
                .bind(&name)
                .fetch_one(&mut admin)
                .await
                .unwrap();
                if killed > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
        });
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn mysql_completion_outlasts_a_lock_wait_timeout() {
    use sqlx::Connection as _;
    use sqlx::Executor as _;
    let Some(url) = servers::server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    // The store gives up waiting for a row lock after 1 s (error 1205, transient).
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
                    .await
                    .map(drop)
            })
        })
        .connect(&url)
        .await
        .unwrap();
    let store = idem::MySqlStore::from_pool(pool);
    store.migrate().await.unwrap();
    let key = servers::unique("my-locked");
    let hash = key_hash(&key);
    let mut other = sqlx::MySqlConnection::connect(&url).await.unwrap();
    completion_survives(&Idem::new(store), &key, move || async move {
        sqlx::query("BEGIN").execute(&mut other).await.unwrap();
        sqlx::query("SELECT 1 FROM idem_idempotency_records WHERE key_hash = ? FOR UPDATE")
            .bind(hash)
            .execute(&mut other)
            .await
            .unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            sqlx::query("COMMIT").execute(&mut other).await.unwrap();
        });
    })
    .await;
}

static OVERSIZE: HandlerConfig =
    HandlerConfig::new("tests::oversize").lease(Duration::from_secs(10));

/// A result larger than MariaDB's `max_allowed_packet` (16 MiB on the test server) can never be
/// stored: the store refuses it before sending it (`StoreError::TooLarge`, no `UPDATE`), the
/// caller still gets it, the attempt ends its lease at once, and the retry runs the handler
/// again under the same operation id — instead of a completion retried, and the key answering
/// 409, for a lease or more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_result_over_max_allowed_packet_keeps_its_operation() {
    use idem::store::{Claim, ClaimRequest, Completion, Outcome, StoreError};
    let Some(url) = servers::server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    let store = idem::MySqlStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let big = "x".repeat(17 << 20);

    // The store alone: refused up front, with the server's limit, one statement (the limit's
    // `SELECT`) and no `UPDATE`; the lease still owns the record.
    let scoped =
        idem::key::ScopedKey::new(&["t"], "tests::oversize", &servers::unique("my-big")).unwrap();
    let claim = ClaimRequest::new(
        &scoped,
        RequestHash::of_bytes(b"oversize"),
        Duration::from_secs(10),
        Duration::from_secs(60),
    );
    let Claim::Acquired(lease) = store.claim(&claim).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    let sent = store.statement_count();
    let completion =
        Completion::new(Outcome::Completed, 200, big.clone().into_bytes()).with_biz_no("po_1");
    match store.complete(&lease, &completion).await {
        Err(StoreError::TooLarge { bytes, limit }) => {
            assert_eq!((bytes, limit), ((17 << 20) + 4, 16 << 20));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.statement_count() - sent, 1, "only the limit was read");
    let small = Completion::new(Outcome::Completed, 200, b"ok".to_vec());
    store.complete(&lease, &small).await.unwrap();

    let idem = Idem::new(store);
    let key = servers::unique("my-oversize");
    let hash = RequestHash::of_bytes(b"oversize");
    let (first_op, answer) =
        run_once::<(String, String), Status, _>(&idem, &OVERSIZE, &key, &[], hash, {
            let big = big.clone();
            async move { Ok((operation_id().unwrap().to_string(), big)) }
        })
        .await
        .unwrap();
    assert_eq!(answer.len(), big.len(), "the caller gets its answer");
    let started = std::time::Instant::now();
    loop {
        let retry =
            run_once::<(String, bool), Status, _>(&idem, &OVERSIZE, &key, &[], hash, async {
                let op = operation_id().unwrap();
                Ok((op.to_string(), op.took_over()))
            })
            .await;
        match retry {
            Ok(ran) => {
                assert_eq!(ran, (first_op, true), "the retry continues the operation");
                break;
            }
            // The lease ends once the abandon lands, long before its 10 s run out.
            Err(Status(409)) if started.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{other:?} after {:?}", started.elapsed()),
        }
    }
}

// ---------------------------------------------------------------- dropped while storing

/// The request future is dropped while its completion waits on a lock the test holds (the
/// client went away at the worst moment). Whether the completion landed or not, the key ends
/// with one stored result and one operation id: the retry replays it, or takes the abandoned
/// record over under the same operation id.
async fn dropped_during_completion<L, LF, U, UF>(idem: Idem, key: &str, lock: L)
where
    L: FnOnce() -> LF + Send + 'static,
    LF: std::future::Future<Output = U> + Send,
    U: FnOnce() -> UF + Send + 'static,
    UF: std::future::Future<Output = ()> + Send,
{
    let hash = RequestHash::of_bytes(b"dropped-completing");
    let ops = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (locked_tx, locked_rx) = tokio::sync::oneshot::channel();
    let first = tokio::spawn({
        let (idem, ops, key) = (idem.clone(), ops.clone(), key.to_owned());
        async move {
            run_once::<String, Status, _>(&idem, &FAULT, &key, &[], hash, async move {
                ops.lock()
                    .unwrap()
                    .push(operation_id().unwrap().to_string());
                let unlock = lock().await;
                let _ = locked_tx.send(unlock);
                Ok("done".to_owned())
            })
            .await
        }
    });
    let unlock = locked_rx.await.expect("the handler took the lock");
    // The completion is now waiting for the lock: drop the request.
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    unlock().await;
    let mut answer = None;
    for _ in 0..300 {
        let ops = ops.clone();
        let retry = run_once::<String, Status, _>(&idem, &FAULT, key, &[], hash, async move {
            ops.lock()
                .unwrap()
                .push(operation_id().unwrap().to_string());
            Ok("done".to_owned())
        })
        .await;
        match retry {
            Err(Status(409)) => tokio::time::sleep(Duration::from_millis(10)).await,
            other => {
                answer = Some(other);
                break;
            }
        }
    }
    assert_eq!(answer.expect("still 409 after 3 s"), Ok("done".to_owned()));
    let ops = ops.lock().unwrap().clone();
    assert!(
        ops.iter().all(|op| *op == ops[0]),
        "one operation id: {ops:?}"
    );
    // One stored result from now on.
    let replay = run_once::<String, Status, _>(&idem, &FAULT, key, &[], hash, async {
        Ok("ran again".to_owned())
    })
    .await;
    assert_eq!(replay, Ok("done".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_request_dropped_during_completion() {
    use sqlx::Connection as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store.migrate().await.unwrap();
    let writer = sqlx::SqliteConnection::connect_with(&SqliteStore::options(&path))
        .await
        .unwrap();
    let writer = Arc::new(tokio::sync::Mutex::new(writer));
    dropped_during_completion(Idem::new(store), "k-sqlite-dropped", move || async move {
        let held = writer.clone();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *writer.lock().await)
            .await
            .unwrap();
        move || async move {
            sqlx::query("COMMIT")
                .execute(&mut *held.lock().await)
                .await
                .unwrap();
        }
    })
    .await;
}

/// [`dropped_during_completion`] on a server database: another connection holds the record's
/// row `FOR UPDATE`, so the completion waits for it.
macro_rules! dropped_while_the_row_is_locked {
    ($name:ident, $var:literal, $store:ty, $conn:ty, $lock:literal) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            use sqlx::Connection as _;
            let Some(url) = servers::server_url($var) else {
                return;
            };
            let store = <$store>::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            let key = servers::unique(stringify!($name));
            let hash = key_hash(&key);
            let other = <$conn>::connect(&url).await.unwrap();
            let other = Arc::new(tokio::sync::Mutex::new(other));
            dropped_during_completion(Idem::new(store), &key, move || async move {
                let held = other.clone();
                let mut conn = other.lock().await;
                sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
                sqlx::query($lock)
                    .bind(hash)
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                move || async move {
                    sqlx::query("COMMIT")
                        .execute(&mut *held.lock().await)
                        .await
                        .unwrap();
                }
            })
            .await;
        }
    };
}

dropped_while_the_row_is_locked!(
    postgres_request_dropped_during_completion,
    "IDEM_TEST_POSTGRES_URL",
    idem::PostgresStore,
    sqlx::PgConnection,
    "SELECT 1 FROM idem.idempotency_records WHERE key_hash = $1 FOR UPDATE"
);
dropped_while_the_row_is_locked!(
    mysql_request_dropped_during_completion,
    "IDEM_TEST_MYSQL_URL",
    idem::MySqlStore,
    sqlx::MySqlConnection,
    "SELECT 1 FROM idem_idempotency_records WHERE key_hash = ? FOR UPDATE"
);

static REMEMBERS: HandlerConfig = HandlerConfig::new("tests::remembers")
    .ttl(Duration::from_secs(60))
    .lease(Duration::from_secs(1))
    .remember(Duration::from_secs(600));

/// What the error type of a `run_once` caller keeps of a `key-expired` answer.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum Refused {
    KeyExpired {
        operation_id: String,
        /// ms from the response's expiry to the end of the remember window.
        remembered_for: u128,
        completed: bool,
    },
    Other(u16),
}

impl From<IdempotencyError> for Refused {
    fn from(e: IdempotencyError) -> Self {
        match e {
            IdempotencyError::KeyExpired(e) => Refused::KeyExpired {
                operation_id: e.operation_id,
                remembered_for: e
                    .remember_until
                    .saturating_duration_since(e.expired_at)
                    .as_millis(),
                completed: e.completed_at.is_some(),
            },
            other => Refused::Other(other.status()),
        }
    }
}

/// `run_once` with `remember`: past the TTL the operation is answered `KeyExpired` (what the
/// record kept) and does not run; the span says the windows, and the `410` is logged.
#[tokio::test(flavor = "current_thread")]
async fn a_remembered_key_is_key_expired_and_logged() {
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());
    let clock = Arc::new(ManualClock::starting_now());
    let idem = Idem::new(MemoryStore::with_clock(clock.clone()));
    let runs = Arc::new(AtomicUsize::new(0));
    let run = || {
        let runs = runs.clone();
        run_once::<String, Refused, _>(
            &idem,
            &REMEMBERS,
            "k-remembered",
            &[],
            RequestHash::of_bytes(b"remembered"),
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(operation_id().unwrap().to_string())
            },
        )
    };
    let op = run().await.unwrap();
    clock.advance(Duration::from_secs(61));
    match run().await {
        Err(Refused::KeyExpired {
            operation_id,
            remembered_for,
            completed,
        }) => {
            assert_eq!(operation_id, op);
            assert_eq!(remembered_for, 540_000);
            assert!(completed);
        }
        other => panic!("expected KeyExpired, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the operation ran again");
    let spans = events.matching("SPAN idem idempotent");
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert!(
        spans[0].contains("ttl=60s") && spans[0].contains("remember=600s"),
        "{spans:?}"
    );
    let answered = events.matching("answering 410");
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert!(answered[0].contains(&op), "{answered:?}");
}

static LOGGED: HandlerConfig = HandlerConfig::new("tests::logged").lease(Duration::from_millis(60));

/// Keys and scope parts are personal data in many deployments: idem's spans and events carry the
/// operation and the key's hash, never the client key or a scope part; replays, `409`, `422`
/// and takeovers are `debug` events.
#[tokio::test(flavor = "current_thread")]
async fn logs_carry_the_operation_and_the_key_hash_never_the_key() {
    let events = Events::default();
    let _events = tracing::subscriber::set_default(events.clone());
    let clock = Arc::new(ManualClock::starting_now());
    let idem = Idem::new(MemoryStore::with_clock(clock.clone()));
    let (tenant, key) = ("tenant-4f1e", "client-key-9c2d");
    let hash = RequestHash::of_bytes(b"logged");
    let run = |hash, body: &'static str| {
        run_once::<String, Status, _>(&idem, &LOGGED, key, &[&tenant], hash, async move {
            Ok(body.to_owned())
        })
    };
    // Fresh, then a replay, then another request under the key (422).
    assert_eq!(run(hash, "first").await.unwrap(), "first");
    assert_eq!(run(hash, "again").await.unwrap(), "first");
    let reused = run(RequestHash::of_bytes(b"other"), "other").await;
    assert_eq!(reused.unwrap_err(), Status(422));
    // A second key held by an attempt that waits: a duplicate gets 409; then its lease ends (by
    // the store's clock) and a retry takes the operation over.
    let (release, wait) = tokio::sync::oneshot::channel::<()>();
    let held = {
        let idem = idem.clone();
        tokio::spawn(async move {
            run_once::<String, Status, _>(&idem, &LOGGED, "k-2", &[&"tenant-4f1e"], hash, async {
                let _ = wait.await;
                Ok("held".to_owned())
            })
            .await
        })
    };
    tokio::task::yield_now().await;
    let busy = run_once::<String, Status, _>(&idem, &LOGGED, "k-2", &[&tenant], hash, async {
        Ok("busy".to_owned())
    })
    .await;
    assert_eq!(busy.unwrap_err(), Status(409));
    clock.advance(Duration::from_secs(1));
    let taken = run_once::<String, Status, _>(&idem, &LOGGED, "k-2", &[&tenant], hash, async {
        Ok("taken over".to_owned())
    })
    .await;
    assert_eq!(taken.unwrap(), "taken over");
    let _ = release.send(());
    let _ = held.await;

    let first_hash = idem::key::scoped_key("tests::logged", &[&tenant], key)
        .unwrap()
        .hash_hex()
        .to_string();
    let spans = events.matching("SPAN idem idempotent");
    assert!(!spans.is_empty());
    for span in &spans {
        assert!(span.contains(r#"operation="tests::logged""#), "{span}");
        assert!(
            span.contains("key_hash=") && span.contains("operation_id="),
            "{span}"
        );
    }
    assert!(spans[0].contains(&first_hash), "{spans:?}");
    for (needle, count) in [
        ("replaying the stored response", 1),
        ("answering 422", 1),
        ("answering 409", 1),
        ("took over an attempt", 1),
    ] {
        let found = events.matching(needle);
        assert_eq!(found.len(), count, "{needle}: {found:?}");
        assert!(found[0].starts_with("DEBUG idem"), "{found:?}");
    }
    assert!(events.matching("replaying")[0].contains(&first_hash));
    // Nothing anywhere names the client key or the tenant.
    let all = events.matching("");
    assert!(all.len() >= 6, "{all:?}");
    for text in &all {
        assert!(!text.contains(key) && !text.contains("k-2"), "{text}");
        assert!(!text.contains(tenant), "{text}");
    }
}

/// idem's metrics through the `metrics` facade, read back from a debugging recorder: one
/// counter per outcome and settlement, the handler's and the store's latency, the in-flight
/// gauge, the sweeper's purges. Labels are the operation and the backend, never the key.
mod metered {
    use std::collections::HashMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    use super::*;

    /// The process's debugging recorder (`crate::recorder`; other tests of this binary record
    /// into it too, so every assertion below is about this test's own operation).
    fn snapshotter() -> &'static Snapshotter {
        &crate::recorder::installed().snapshotter
    }

    /// `name{label=value,..}` (labels sorted) -> counter or gauge value, or histogram count,
    /// since the recorder was installed. (A snapshot drains every metric: the deltas are added
    /// up here, so that the tests below never lose each other's values.)
    fn read() -> HashMap<String, f64> {
        static TOTALS: std::sync::Mutex<Option<HashMap<String, f64>>> = std::sync::Mutex::new(None);
        let mut totals = TOTALS.lock().unwrap();
        let totals = totals.get_or_insert_with(HashMap::new);
        for (key, _, _, value) in snapshotter().snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let total = totals.entry(name).or_insert(0.0);
            match value {
                DebugValue::Counter(n) => *total += n as f64,
                // Drained like the others (`swap(0)`): a gauge's value is the sum of its reads.
                DebugValue::Gauge(g) => *total += g.into_inner(),
                DebugValue::Histogram(v) => *total += v.len() as f64,
            }
        }
        totals.clone()
    }

    static CACHED: HandlerConfig = HandlerConfig::new("tests::metered_cache");

    static WAITS: HandlerConfig =
        HandlerConfig::new("tests::metered_waits").wait(Duration::from_secs(10));

    /// A duplicate that waits and is answered counts as `answered`, one over the cap as
    /// `over_cap`; the gauge of waiters is up while it waits and down after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_are_counted() {
        let _ = snapshotter();
        let idem = Idem::new(MemoryStore::new()).with_max_waiters(1);
        let hash = RequestHash::of_bytes(b"waits");
        let labels = "backend=memory,operation=tests::metered_waits";
        let name = |n: &str, more: &str| format!("{n}{{{labels}{more}}}");
        let before = read();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let started = Arc::new(tokio::sync::Notify::new());
        let first = tokio::spawn({
            let (idem, started) = (idem.clone(), started.clone());
            async move {
                run_once::<String, Status, _>(&idem, &WAITS, "w-1", &[], hash, async move {
                    started.notify_one();
                    let _ = released.await;
                    Ok("first".to_owned())
                })
                .await
            }
        });
        started.notified().await;
        let waiter = tokio::spawn({
            let idem = idem.clone();
            async move {
                run_once::<String, Status, _>(&idem, &WAITS, "w-1", &[], hash, async {
                    Ok("second".to_owned())
                })
                .await
            }
        });
        while idem.waiting() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let up = read();
        let over = run_once::<String, Status, _>(&idem, &WAITS, "w-1", &[], hash, async {
            Ok("third".to_owned())
        })
        .await;
        assert_eq!(over, Err(Status(409)), "over the cap: 409 at once");
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), "first");
        assert_eq!(waiter.await.unwrap().unwrap(), "first");
        let m = read();
        let delta = |m: &HashMap<String, f64>, name: &str| {
            m.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0)
        };
        assert_eq!(delta(&up, &name("idem_waiting", "")), 1.0, "one waits");
        assert_eq!(delta(&m, &name("idem_waiting", "")), 0.0, "nobody waits");
        assert_eq!(
            delta(&m, &name("idem_waits_total", ",outcome=answered")),
            1.0
        );
        assert_eq!(
            delta(&m, &name("idem_waits_total", ",outcome=over_cap")),
            1.0
        );
        assert_eq!(
            delta(&m, &name("idem_waits_total", ",outcome=timed_out")),
            0.0
        );
    }

    /// A replay answered from the replay cache counts as a hit, and as a replay.
    #[tokio::test(flavor = "current_thread")]
    async fn replay_cache_hits_are_counted() {
        let _ = snapshotter();
        let idem = Idem::new(MemoryStore::new()).with_replay_cache(idem::ReplayCache::new(16));
        let hash = RequestHash::of_bytes(b"cached");
        let run = |body: &'static str| {
            run_once::<String, Status, _>(&idem, &CACHED, "c-1", &[&"t"], hash, async move {
                Ok(body.to_owned())
            })
        };
        let before = read();
        assert_eq!(run("first").await.unwrap(), "first");
        assert_eq!(run("again").await.unwrap(), "first");
        assert_eq!(run("again").await.unwrap(), "first");
        let m = read();
        let delta = |name: &str| {
            m.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0)
        };
        let labels = "backend=memory,operation=tests::metered_cache";
        assert_eq!(
            delta(&format!("idem_replay_cache_hits_total{{{labels}}}")),
            2.0
        );
        assert_eq!(
            delta(&format!("idem_requests_total{{{labels},outcome=replay}}")),
            2.0
        );
    }

    static LOCAL: HandlerConfig = HandlerConfig::new("tests::metered_local");

    /// idem keeps each operation's metric keys per thread, but registers every metric with the
    /// recorder in force at that moment: a thread's local recorder, set after the keys were
    /// built under the global one, sees the requests made while it is set.
    #[tokio::test(flavor = "current_thread")]
    async fn a_local_recorder_set_later_sees_the_metrics() {
        let _ = snapshotter();
        let idem = Idem::new(MemoryStore::new());
        let run = |key: &'static str| {
            run_once::<String, Status, _>(
                &idem,
                &LOCAL,
                key,
                &[&"t"],
                RequestHash::of_bytes(b"local"),
                async { Ok("done".to_owned()) },
            )
        };
        // The keys of this operation are built now, under the global recorder.
        run("l-1").await.unwrap();
        let local = DebuggingRecorder::new();
        let snapshotter = local.snapshotter();
        {
            let _guard = metrics::set_default_local_recorder(&local);
            run("l-2").await.unwrap();
            run("l-2").await.unwrap();
        }
        let seen: HashMap<String, u64> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value)| {
                let key = key.key();
                let outcome = key
                    .labels()
                    .find(|l| l.key() == "outcome")?
                    .value()
                    .to_owned();
                match value {
                    DebugValue::Counter(n) if key.name() == "idem_requests_total" => {
                        Some((outcome, n))
                    }
                    _ => None,
                }
            })
            .collect();
        assert_eq!(seen.get("fresh"), Some(&1), "{seen:?}");
        assert_eq!(seen.get("replay"), Some(&1), "{seen:?}");
    }

    static METERED: HandlerConfig = HandlerConfig::new("tests::metered")
        .lease(Duration::from_millis(60))
        .ttl(Duration::from_secs(60));

    #[tokio::test(flavor = "current_thread")]
    async fn every_outcome_is_counted_by_operation_and_backend() {
        let _ = snapshotter();
        let clock = Arc::new(ManualClock::starting_now());
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let idem = Idem::from_arc(store.clone());
        let hash = RequestHash::of_bytes(b"metered");
        let run = |key: &'static str, hash, body: &'static str| {
            run_once::<String, Status, _>(&idem, &METERED, key, &[&"t"], hash, async move {
                Ok(body.to_owned())
            })
        };
        assert_eq!(run("m-1", hash, "first").await.unwrap(), "first");
        assert_eq!(run("m-1", hash, "again").await.unwrap(), "first");
        let other = RequestHash::of_bytes(b"other");
        assert_eq!(run("m-1", other, "x").await.unwrap_err(), Status(422));
        // A held key: 409 for a duplicate, then a takeover once its lease ended; the holder's
        // late result is refused by the fence.
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let held = {
            let idem = idem.clone();
            tokio::spawn(async move {
                run_once::<String, Status, _>(&idem, &METERED, "m-2", &[&"t"], hash, async {
                    let _ = wait.await;
                    Ok("held".to_owned())
                })
                .await
            })
        };
        tokio::task::yield_now().await;
        assert_eq!(run("m-2", hash, "busy").await.unwrap_err(), Status(409));
        clock.advance(Duration::from_secs(1));
        assert_eq!(run("m-2", hash, "taken").await.unwrap(), "taken");
        let _ = release.send(());
        let _ = held.await;
        // The records expire; the sweeper purges them.
        clock.advance(Duration::from_secs(120));
        let before = read();
        let purged = idem::store::Sweeper::new(store.clone())
            .sweep_once()
            .await
            .unwrap();
        assert_eq!(purged, 2);

        let m = read();
        let get = |name: &str| m.get(name).copied().unwrap_or(0.0);
        let op = "backend=memory,operation=tests::metered";
        for (outcome, n) in [
            ("fresh", 2.0),
            ("replay", 1.0),
            ("key_reused", 1.0),
            ("in_progress", 1.0),
            ("takeover", 1.0),
        ] {
            let name = format!("idem_requests_total{{{op},outcome={outcome}}}");
            assert_eq!(get(&name), n, "{name}: {m:#?}");
        }
        assert_eq!(
            get(&format!("idem_settlements_total{{{op},settlement=stored}}")),
            2.0
        );
        assert_eq!(
            get(&format!(
                "idem_settlements_total{{{op},settlement=fenced_out}}"
            )),
            1.0
        );
        assert_eq!(get(&format!("idem_in_flight{{{op}}}")), 0.0);
        assert!(get(&format!("idem_handler_seconds{{{op}}}")) >= 3.0);
        assert!(get("idem_store_seconds{backend=memory,statement=claim}") >= 6.0);
        assert!(get("idem_store_seconds{backend=memory,statement=complete}") >= 2.0);
        let purged_total = "idem_purged_total{backend=memory,phase=records}";
        assert!(get(purged_total) - before.get(purged_total).copied().unwrap_or(0.0) >= 2.0);
        // No label carries a key.
        assert!(m.keys().all(|k| !k.contains("m-1") && !k.contains("m-2")));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_unreachable_store_is_counted_as_unavailable() {
        let _ = snapshotter();
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
        store.migrate().await.unwrap();
        store.pool().close().await;
        let idem = Idem::new(store);
        let hash = RequestHash::of_bytes(b"down");
        let answer = run_once::<String, Status, _>(&idem, &UNAVAILABLE, "m-3", &[], hash, async {
            Ok("never".to_owned())
        })
        .await;
        assert_eq!(answer.unwrap_err(), Status(503));
        let m = read();
        let name =
            "idem_requests_total{backend=sqlite,operation=tests::unavailable,outcome=unavailable}";
        assert_eq!(m.get(name).copied(), Some(1.0), "{m:#?}");
    }

    static UNAVAILABLE: HandlerConfig = HandlerConfig::new("tests::unavailable");

    static STORE_DOWN: HandlerConfig =
        HandlerConfig::new("tests::store-down").lease(Duration::from_millis(300));

    /// The database goes away while the handler runs: the completion is retried while the lease
    /// is held (`idem_completion_retries_total`), then given up (`settlement="failed"`).
    #[tokio::test(flavor = "current_thread")]
    async fn completion_retries_and_failures_are_counted() {
        let _ = snapshotter();
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
        store.migrate().await.unwrap();
        let pool = store.pool().clone();
        let idem = Idem::new(store);
        let hash = RequestHash::of_bytes(b"store-down");
        let answer = run_once::<String, Status, _>(&idem, &STORE_DOWN, "m-4", &[], hash, async {
            pool.close().await;
            Ok("shipped".to_owned())
        })
        .await;
        assert_eq!(answer.unwrap(), "shipped");
        let op = "backend=sqlite,operation=tests::store-down";
        let failed = format!("idem_settlements_total{{{op},settlement=failed}}");
        // The retries run in the background until the lease ends (300 ms).
        let mut m = read();
        for _ in 0..500 {
            if m.contains_key(&failed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            m = read();
        }
        assert_eq!(m.get(&failed).copied(), Some(1.0), "{m:#?}");
        let retries = format!("idem_completion_retries_total{{{op}}}");
        assert!(m.get(&retries).copied().unwrap_or(0.0) >= 1.0, "{m:#?}");
        assert_eq!(
            m.get(&format!("idem_in_flight{{{op}}}")).copied(),
            Some(0.0)
        );
    }
}
