//! The bounded wait of an in-flight duplicate (`#[idempotent(wait = "..")]`) through an axum
//! handler, in process, over every store: memory, SQLite, PostgreSQL, MariaDB and Redis (when
//! `IDEM_TEST_POSTGRES_URL` / `IDEM_TEST_MYSQL_URL` / `IDEM_TEST_REDIS_URL` are set).
//!
//! A storm of duplicates is answered by replays within the bound (no `409`), and with `409` past
//! it; a duplicate over the handle's cap of waiters is `409` at once; another request under the
//! key is `422` at once; a waiter whose client hangs up leaves nothing behind; and when the
//! first attempt ends without a result, one waiter continues its operation under the same
//! operation id and the others replay what it stored.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem::axum::Json;
use idem::{Fingerprint, Idem, Snapshot, idempotent};
use tokio::sync::{Barrier, Semaphore};
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::backends::{Fixture, backend_tests, on_store};
use crate::counted::Counted;
use crate::servers::unique;

/// Concurrent duplicates per storm.
const STORM: usize = 200;

#[derive(Clone)]
pub(crate) struct App {
    idem: Idem,
    /// The operation id of each run of the handler.
    runs: Arc<Mutex<Vec<String>>>,
    /// Each run takes a permit first: tests hold them to keep the first attempt in flight.
    gate: Arc<Semaphore>,
}

impl App {
    pub(crate) fn new(idem: Idem, permits: usize) -> Self {
        App {
            idem,
            runs: Arc::default(),
            gate: Arc::new(Semaphore::new(permits)),
        }
    }

    pub(crate) fn runs(&self) -> Vec<String> {
        self.runs.lock().unwrap().clone()
    }
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

#[derive(serde::Deserialize, Fingerprint)]
pub(crate) struct CreatePayment {
    amount: u64,
}

#[derive(serde::Serialize, Snapshot)]
pub(crate) struct Payment {
    #[snapshot(biz_no)]
    id: String,
    amount: u64,
}

/// The handler's work, whatever the front: recorded, held at the gate, 50 ms.
pub(crate) async fn pay(app: &App, req: CreatePayment) -> Payment {
    let op = idem::operation_id().unwrap().to_string();
    app.runs.lock().unwrap().push(op.clone());
    let _permit = app.gate.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let id = format!("pay_{op}");
    Payment {
        id,
        amount: req.amount,
    }
}

async fn run(app: &App, req: CreatePayment) -> (StatusCode, Json<Payment>) {
    (StatusCode::CREATED, Json(pay(app, req).await))
}

/// Waits up to 10 s: far longer than the handler.
#[idempotent(scope = global, wait = "10s", lease = "5s")]
async fn waits(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    run(&app, req).await
}

/// Waits 200 ms: shorter than a handler held at its gate.
#[idempotent(scope = global, wait = "200ms", lease = "5s")]
async fn waits_briefly(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    run(&app, req).await
}

/// Waits 300 ms, and runs unprotected when the store cannot be reached at the claim.
#[idempotent(scope = global, wait = "300ms", lease = "5s", fail_open)]
async fn waits_or_fails_open(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    run(&app, req).await
}

fn router(app: &App) -> Router {
    Router::new()
        .route("/waits", post(waits))
        .route("/waits-briefly", post(waits_briefly))
        .route("/waits-or-fails-open", post(waits_or_fails_open))
        .with_state(app.clone())
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    replayed: bool,
    retry_after: bool,
    body: String,
}

async fn send(router: &Router, path: &str, key: &str, amount: u64) -> Answer {
    let req = Request::post(path)
        .header(CONTENT_TYPE, "application/json")
        .header("idempotency-key", key)
        .body(Body::from(format!(r#"{{"amount":{amount}}}"#)))
        .unwrap();
    let res = router.clone().oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        replayed: parts
            .headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true"),
        retry_after: parts.headers.contains_key(RETRY_AFTER),
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// The problem document of a refusal.
fn problem(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// [`send`] in a task of its own.
fn spawn_send(router: &Router, path: &str, key: &str, amount: u64) -> JoinHandle<Answer> {
    let (router, path, key) = (router.clone(), path.to_owned(), key.to_owned());
    tokio::spawn(async move { send(&router, &path, &key, amount).await })
}

/// Returns once `ready` holds, asked every 5 ms.
async fn until(ready: impl Fn() -> bool) {
    while !ready() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `STORM` requests with one key at once; their answers.
async fn storm(router: &Router, path: &str, key: &str) -> Vec<Answer> {
    let gate = Arc::new(Barrier::new(STORM));
    let tasks: Vec<_> = (0..STORM)
        .map(|_| {
            let (router, gate, path, key) = (
                router.clone(),
                gate.clone(),
                path.to_owned(),
                key.to_owned(),
            );
            tokio::spawn(async move {
                gate.wait().await;
                send(&router, &path, &key, 100).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    answers
}

/// Generous: the storm queues on the store's pool, and a slow machine must not turn that wait
/// into 503s.
fn handle(fx: &Fixture) -> (Arc<Counted>, Idem) {
    let counted = Counted::new(fx.store.clone());
    let idem = Idem::from_arc(counted.clone()).with_store_timeout(Duration::from_secs(60));
    (counted, idem)
}

async fn duplicates_wait_and_replay(fx: &Fixture) {
    let (counted, idem) = handle(fx);
    let app = App::new(idem.clone(), usize::MAX >> 4);
    let answers = storm(&router(&app), "/waits", &unique("wait")).await;
    assert_eq!(app.runs().len(), 1, "the handler ran more than once");
    let fresh: Vec<_> = answers.iter().filter(|a| !a.replayed).collect();
    assert_eq!(fresh.len(), 1, "one first answer");
    for a in &answers {
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        assert_eq!(a.body, fresh[0].body, "every answer is the first one");
    }
    assert_eq!(idem.waiting(), 0, "no waiter left");
    // A waiter claims once more when the attempt, held in this process, wakes it (one that
    // met the key before the attempt was registered may poll once or twice before): about
    // 2 claims per waiter, 1 for the requests that came after the completion.
    let claims = counted.claims() as usize;
    assert!(
        (STORM..=STORM * 3).contains(&claims),
        "{claims} claims for {STORM} requests"
    );
    assert_eq!(counted.completes(), 1);
}

async fn past_the_bound_409_and_another_request_422(fx: &Fixture) {
    let (_, idem) = handle(fx);
    let app = App::new(idem.clone(), 0);
    let router = router(&app);
    let key = unique("brief");
    let first = spawn_send(&router, "/waits-briefly", &key, 100);
    until(|| !app.runs().is_empty()).await;
    let started = tokio::time::Instant::now();
    let late = send(&router, "/waits-briefly", &key, 100).await;
    assert_eq!(late.status, StatusCode::CONFLICT, "{}", late.body);
    assert!(late.retry_after);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "waited the bound"
    );
    // The problem says how long the request waited.
    let waited = problem(&late.body)["waited"].as_f64();
    assert!(
        waited.is_some_and(|w| (0.2..5.0).contains(&w)),
        "{}",
        late.body
    );
    let started = tokio::time::Instant::now();
    let other = send(&router, "/waits-briefly", &key, 999).await;
    assert_eq!(
        other.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        other.body
    );
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "422 at once"
    );
    // In flight, the key's end is not known yet.
    assert_eq!(problem(&other.body).get("key_expires_at"), None);
    app.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    let again = send(&router, "/waits-briefly", &key, 100).await;
    assert!(again.replayed && again.status == StatusCode::CREATED);
    // Stored: the key is bound to its first request until the end of its record, the default
    // TTL from now (by the database's clock, this machine's too).
    let other = send(&router, "/waits-briefly", &key, 999).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    let at =
        |d: Duration| idem::store::Timestamp::from_system_time(std::time::SystemTime::now() + d);
    let (ttl, slack) = (idem::HandlerConfig::DEFAULT_TTL, Duration::from_secs(600));
    let expires = problem(&other.body)["key_expires_at"]
        .as_str()
        .map(str::to_owned);
    assert!(
        expires.as_ref().is_some_and(|e| {
            (at(ttl - slack).to_rfc3339()..at(ttl + slack).to_rfc3339()).contains(e)
        }),
        "{}",
        other.body
    );
    assert_eq!(idem.waiting(), 0);
}

/// A duplicate that saw the first attempt running never runs beside it: claims that fail during
/// its wait (`fail_open` would run the handler unprotected) leave it waiting, then `409`.
async fn a_store_failing_mid_wait_never_runs_a_second_copy(fx: &Fixture) {
    let (counted, idem) = handle(fx);
    let app = App::new(idem.clone(), 0);
    let router = router(&app);
    let key = unique("failing");
    let path = "/waits-or-fails-open";
    let first = spawn_send(&router, path, &key, 100);
    until(|| !app.runs().is_empty()).await;
    let duplicate = spawn_send(&router, path, &key, 100);
    until(|| idem.waiting() >= 1).await;
    counted.refuse_claims(true);
    // A second copy would hang at the gate: bounded, so that the test fails instead.
    let duplicate = tokio::time::timeout(Duration::from_secs(5), duplicate).await;
    counted.refuse_claims(false);
    let runs = app.runs();
    let duplicate = duplicate
        .unwrap_or_else(|_| panic!("the duplicate ran the handler beside the first: {runs:?}"))
        .unwrap();
    assert_eq!(duplicate.status, StatusCode::CONFLICT, "{}", duplicate.body);
    assert_eq!(app.runs().len(), 1, "no unprotected run beside the first");
    app.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
}

/// The first attempt in one process, the duplicate in another (two handles on one store, each
/// with waiters of its own): nothing wakes the duplicate, which learns of the completion by
/// claiming again, and is replayed.
async fn a_waiter_of_another_process_learns_by_claiming(fx: &Fixture) {
    let (_, here) = handle(fx);
    let (counted, there) = handle(fx);
    let app = App::new(here.clone(), 0);
    let (first_router, other_router) = (
        router(&app),
        router(&App {
            idem: there.clone(),
            ..app.clone()
        }),
    );
    let key = unique("elsewhere");
    let first = spawn_send(&first_router, "/waits", &key, 100);
    until(|| !app.runs().is_empty()).await;
    let duplicate = spawn_send(&other_router, "/waits", &key, 100);
    until(|| there.waiting() >= 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.gate.add_permits(1);
    let (first, duplicate) = (first.await.unwrap(), duplicate.await.unwrap());
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(
        duplicate.replayed && duplicate.status == StatusCode::CREATED,
        "{}",
        duplicate.body
    );
    assert_eq!(duplicate.body, first.body);
    assert_eq!(app.runs().len(), 1);
    // Polled while it waited: the first claim, then one every 25 ms doubling to 250 ms.
    assert!(counted.claims() >= 3, "{} claims", counted.claims());
    assert_eq!((here.waiting(), there.waiting()), (0, 0));
}

async fn over_the_cap_409_at_once(fx: &Fixture) {
    let (_, idem) = handle(fx);
    let idem = idem.with_max_waiters(2);
    let app = App::new(idem.clone(), 0);
    let router = router(&app);
    let key = unique("cap");
    let first = spawn_send(&router, "/waits", &key, 100);
    until(|| !app.runs().is_empty()).await;
    let waiting: Vec<_> = (0..2)
        .map(|_| spawn_send(&router, "/waits", &key, 100))
        .collect();
    until(|| idem.waiting() >= 2).await;
    let started = tokio::time::Instant::now();
    let over = send(&router, "/waits", &key, 100).await;
    assert_eq!(over.status, StatusCode::CONFLICT, "{}", over.body);
    assert!(over.retry_after);
    assert!(started.elapsed() < Duration::from_secs(5), "409 at once");
    assert_eq!(problem(&over.body)["waited"], 0.0, "{}", over.body);
    app.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    for w in waiting {
        let a = w.await.unwrap();
        assert!(a.replayed && a.status == StatusCode::CREATED, "{}", a.body);
    }
    assert_eq!(idem.waiting(), 0);
}

async fn a_waiter_that_hangs_up_leaves_nothing(fx: &Fixture) {
    let (_, idem) = handle(fx);
    let app = App::new(idem.clone(), 0);
    let router = router(&app);
    let key = unique("hangup");
    let first = spawn_send(&router, "/waits", &key, 100);
    until(|| !app.runs().is_empty()).await;
    let waiter = spawn_send(&router, "/waits", &key, 100);
    until(|| idem.waiting() >= 1).await;
    // The client hangs up: its request is dropped.
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(idem.waiting(), 0, "the waiter is counted out");
    app.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    assert_eq!(app.runs().len(), 1);
}

async fn a_first_attempt_that_dies_is_continued_by_a_waiter(fx: &Fixture) {
    let (_, idem) = handle(fx);
    let app = App::new(idem.clone(), 0);
    let router = router(&app);
    let key = unique("dies");
    let first = spawn_send(&router, "/waits", &key, 100);
    until(|| !app.runs().is_empty()).await;
    let waiters: Vec<_> = (0..5)
        .map(|_| spawn_send(&router, "/waits", &key, 100))
        .collect();
    until(|| idem.waiting() >= 5).await;
    // The first request is dropped mid-handler (its client hung up): its record keeps the
    // operation id with the lease ended, and the waiters are woken.
    first.abort();
    let _ = first.await;
    app.gate.add_permits(1);
    let mut answers = Vec::new();
    for w in waiters {
        answers.push(w.await.unwrap());
    }
    let runs = app.runs();
    assert_eq!(
        runs.len(),
        2,
        "one waiter continued the operation: {runs:?}"
    );
    assert_eq!(runs[0], runs[1], "under the same operation id");
    assert!(answers.iter().all(|a| a.status == StatusCode::CREATED));
    assert_eq!(answers.iter().filter(|a| !a.replayed).count(), 1);
    assert!(answers.iter().all(|a| a.body == answers[0].body));
    assert_eq!(idem.waiting(), 0);
}

/// What a server does with a request whose client hangs up.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum HangUp {
    /// Drops it at once (hyper: axum, tonic).
    Drops,
    /// Runs it to its end (actix-web notices the closed socket when it writes the answer): a
    /// waiter then ends with its bound, or with the first attempt.
    RunsOn,
}

/// Over a real socket, at `addr` + `path` (a handler that waits 10 s over [`pay`]): five
/// duplicates wait for a first request held at the gate, a sixth hangs up mid-wait (and is
/// counted out at once where the server drops it), and once the first answers the five get its
/// answer, replayed, and nobody waits any more.
pub(crate) async fn waiters_over_a_socket(
    addr: SocketAddr,
    path: &str,
    app: &App,
    idem: &Idem,
    hang_up: HangUp,
) {
    use tokio::io::AsyncWriteExt;
    let key = unique("socket");
    let body = r#"{"amount":100}"#;
    let post = move |path: String, key: String| async move {
        let headers = [("Idempotency-Key", key.as_str())];
        crate::payments::send(addr, "POST", &path, &headers, Some(body)).await
    };
    let first = tokio::spawn(post(path.to_owned(), key.clone()));
    until(|| !app.runs().is_empty()).await;
    let waiters: Vec<_> = (0..5)
        .map(|_| tokio::spawn(post(path.to_owned(), key.clone())))
        .collect();
    let mut leaving = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Idempotency-Key: {key}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    leaving.write_all(request.as_bytes()).await.unwrap();
    until(|| idem.waiting() >= 6).await;
    drop(leaving);
    if hang_up == HangUp::Drops {
        // The server drops the request, and its wait with it.
        until(|| idem.waiting() <= 5).await;
    }
    app.gate.add_permits(1);
    let first = first.await.unwrap();
    assert_eq!(first.status, 201, "{}", first.text());
    for w in waiters {
        let a = w.await.unwrap();
        assert_eq!(a.status, 201, "{}", a.text());
        assert_eq!(a.header("idempotent-replayed"), Some("true"));
        assert_eq!(a.text(), first.text(), "the first answer");
    }
    assert_eq!(app.runs().len(), 1);
    // The one that hung up, if it still ran, was woken with the others.
    for _ in 0..200 {
        if idem.waiting() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(idem.waiting(), 0);
}

async fn axum_waiters_over_a_socket(fx: &Fixture) {
    let (_, idem) = handle(fx);
    let app = App::new(idem.clone(), 0);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(axum::serve(listener, router(&app)).into_future());
    waiters_over_a_socket(addr, "/waits", &app, &idem, HangUp::Drops).await;
    served.abort();
}

backend_tests!(2, on_store, [sqlite, postgres], axum_waiters_over_a_socket);

backend_tests!(
    4,
    on_store,
    [memory, sqlite, postgres, mysql, redis],
    duplicates_wait_and_replay,
    past_the_bound_409_and_another_request_422,
    a_store_failing_mid_wait_never_runs_a_second_copy,
    a_waiter_of_another_process_learns_by_claiming,
    over_the_cap_409_at_once,
    a_waiter_that_hangs_up_leaves_nothing,
    a_first_attempt_that_dies_is_continued_by_a_waiter,
);
