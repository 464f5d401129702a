//! The actix-web front on real servers: `HttpServer` on `127.0.0.1:0`, in a thread and an actix
//! runtime of its own (actix-web's services are `!Send`), spoken to over TCP by the HTTP/1.1
//! client of `payments.rs`. The `Idempotency` middleware in front of plain handlers (the cases
//! of `http_layer.rs`), and an `#[idempotent]` handler whose client hangs up mid-request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, HttpServer, web};
use idem::actix::{Idempotency, idempotent};
use idem::store::Store;
use idem::{Fingerprint, HandlerConfig, Idem, Snapshot, SqliteStore};
use serde_json::{Value, json};

use crate::backends::{Fixture, backend_tests, on_clocked_store, on_store};
use crate::payments::{Response, exchange, send};
use crate::servers::unique;

backend_tests!(
    2,
    on_store,
    [memory, sqlite, postgres, mysql],
    client_hanging_up_after_the_effect_keeps_its_operation,
    middleware_replays_equivalent_requests,
    middleware_key_reused_is_422,
    middleware_concurrent_duplicate_is_409_with_retry_after,
    middleware_missing_and_invalid_keys_are_400,
    duplicates_wait_over_a_socket,
);

// ---------------------------------------------------------------- the server

/// An actix-web server of `app` on `127.0.0.1:0`, in a thread of its own; stopped on drop.
struct Served {
    addr: SocketAddr,
    handle: ServerHandle,
}

impl Served {
    fn start<F, T>(app: F) -> Served
    where
        F: Fn() -> App<T> + Send + Clone + 'static,
        T: actix_web::dev::ServiceFactory<
                actix_web::dev::ServiceRequest,
                Config = (),
                Response = actix_web::dev::ServiceResponse,
                Error = actix_web::Error,
                InitError = (),
            > + 'static,
    {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(app)
                    .workers(1)
                    .disable_signals()
                    .bind("127.0.0.1:0")
                    .unwrap();
                let addr = server.addrs()[0];
                let server = server.run();
                tx.send((addr, server.handle())).unwrap();
                server.await.unwrap();
            });
        });
        let (addr, handle) = rx.recv().unwrap();
        Served { addr, handle }
    }

    async fn post(&self, key: Option<&str>, body: &str) -> Response {
        let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        send(self.addr, "POST", "/payments", &headers, Some(body)).await
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

// ---------------------------------------------------------------- the middleware

#[derive(Fingerprint, serde::Deserialize)]
#[allow(dead_code)]
struct CreatePayment {
    amount: rust_decimal::Decimal,
    currency: String,
    #[fingerprint(env)]
    client_ip: Option<String>,
}

/// Plain handlers behind `Idempotency::for_type::<CreatePayment>` (global keys, then
/// `configure`): `POST /payments` counts its runs in `hits`, takes 500 ms when the body says
/// `slow`, and answers `201 {"id":"pay_<n>"}`; `GET /payments` lists.
fn layered(
    idem: Idem,
    hits: Arc<AtomicUsize>,
    configure: impl Fn(Idempotency) -> Idempotency + Send + Clone + 'static,
) -> Served {
    Served::start(move || {
        let hits = hits.clone();
        let handler = move |body: String| {
            let hits = hits.clone();
            async move {
                let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
                if body.contains("slow") {
                    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
                }
                HttpResponse::Created()
                    .content_type("application/json")
                    .body(format!(r#"{{"id":"pay_{n}"}}"#))
            }
        };
        let mw = configure(Idempotency::for_type::<CreatePayment>(idem.clone()).global());
        App::new()
            .wrap(mw)
            .route("/payments", web::post().to(handler))
            .route("/payments", web::get().to(|| async { "listing" }))
    })
}

async fn middleware_replays_equivalent_requests(fx: &Fixture) {
    let hits = Arc::new(AtomicUsize::new(0));
    let s = layered(Idem::from_arc(fx.store.clone()), hits.clone(), |m| m);
    let key = unique("mw-replay");
    let first = s
        .post(
            Some(&key),
            r#"{"amount":100,"currency":"EUR","client_ip":"1.2.3.4"}"#,
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.replayed());
    // 100.00 == 100, the member order and the environment field do not count.
    let retry = s
        .post(
            Some(&key),
            r#"{"currency":"EUR","amount":"100.00","client_ip":"5.6.7.8"}"#,
        )
        .await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // Safe methods pass through, keyless.
    let list = send(s.addr, "GET", "/payments", &[], None).await;
    assert_eq!((list.status, list.text().as_str()), (200, "listing"));
}

async fn middleware_key_reused_is_422(fx: &Fixture) {
    let hits = Arc::new(AtomicUsize::new(0));
    let s = layered(Idem::from_arc(fx.store.clone()), hits.clone(), |m| m);
    let key = unique("mw-reused");
    let first = s
        .post(Some(&key), r#"{"amount":100,"currency":"EUR"}"#)
        .await;
    assert_eq!(first.status, 201);
    let other = s.post(Some(&key), r#"{"amount":5,"currency":"EUR"}"#).await;
    other.assert_problem(422, "key-reused");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

async fn middleware_concurrent_duplicate_is_409_with_retry_after(fx: &Fixture) {
    let hits = Arc::new(AtomicUsize::new(0));
    let s = layered(Idem::from_arc(fx.store.clone()), hits.clone(), |m| m);
    let key = unique("mw-busy");
    let slow = r#"{"amount":100,"currency":"EUR","client_ip":"slow"}"#;
    let (first, second) = tokio::join!(s.post(Some(&key), slow), async {
        while hits.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        s.post(Some(&key), slow).await
    });
    assert_eq!(first.status, 201);
    second.assert_problem(409, "in-progress");
    let after: u64 = second.header("retry-after").unwrap().parse().unwrap();
    assert!(after >= 1, "{after}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

async fn middleware_missing_and_invalid_keys_are_400(fx: &Fixture) {
    let hits = Arc::new(AtomicUsize::new(0));
    let s = layered(Idem::from_arc(fx.store.clone()), hits.clone(), |m| m);
    let body = r#"{"amount":1,"currency":"EUR"}"#;
    s.post(None, body).await.assert_problem(400, "missing-key");
    s.post(Some(""), body)
        .await
        .assert_problem(400, "invalid-key");
    s.post(Some(&"k".repeat(1000)), body)
        .await
        .assert_problem(400, "invalid-key");
    let mut raw = format!(
        "POST /payments HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n\
         Idempotency-Key: k-",
        s.addr,
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(b"\xff\xfe\r\n\r\n");
    raw.extend_from_slice(body.as_bytes());
    exchange(s.addr, &raw)
        .await
        .assert_problem(400, "invalid-key");
    // Not JSON, or not the request's shape: no fingerprint.
    s.post(Some("k-1"), "not json")
        .await
        .assert_problem(400, "request-not-fingerprintable");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn middleware_body_over_the_limit_is_413() {
    let hits = Arc::new(AtomicUsize::new(0));
    let idem = Idem::new(idem::MemoryStore::new());
    let s = layered(idem, hits.clone(), |m| m.body_limit(16));
    let answer = s
        .post(
            Some("k-big"),
            r#"{"amount":1,"currency":"a long currency name"}"#,
        )
        .await;
    answer.assert_problem(413, "body-too-large");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// A SQLite store whose pool is closed: every claim fails.
async fn closed_sqlite() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    store.pool().close().await;
    (Arc::new(store), dir)
}

/// The store unavailable: `503 store-unavailable` with `Retry-After`, the handler not run;
/// under `fail_open` the handler runs and its answer says `Idempotency-Status: unprotected`.
#[tokio::test]
async fn middleware_store_unavailable_is_503_or_unprotected() {
    let (store, _dir) = closed_sqlite().await;
    let hits = Arc::new(AtomicUsize::new(0));
    let closed = layered(Idem::from_arc(store.clone()), hits.clone(), |m| m);
    let body = r#"{"amount":1,"currency":"EUR"}"#;
    let answer = closed.post(Some("k-down"), body).await;
    answer.assert_problem(503, "store-unavailable");
    assert!(answer.header("retry-after").is_some());
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let open = layered(Idem::from_arc(store), hits.clone(), |m| {
        m.config(HandlerConfig::for_route().fail_open(true))
    });
    let answer = open.post(Some("k-down"), body).await;
    assert_eq!(answer.status, 201, "{}", answer.text());
    assert_eq!(answer.header("idempotency-status"), Some("unprotected"));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// Without `scope(..)`, `global()` or a default scope on the handle, building the application
/// panics, saying what to write.
#[test]
fn a_middleware_without_a_scope_does_not_build() {
    let idem = Idem::new(idem::MemoryStore::new());
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        actix_web::rt::System::new().block_on(async {
            let mw = Idempotency::for_type::<CreatePayment>(idem);
            actix_web::test::init_service(
                App::new()
                    .wrap(mw)
                    .route("/payments", web::post().to(HttpResponse::Created)),
            )
            .await;
        })
    }))
    .unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains(".global()"), "{message}");
    assert!(message.contains(".scope("), "{message}");
}

// ---------------------------------------------------------------- a client hanging up

#[derive(serde::Deserialize, Fingerprint)]
struct Order {
    amount: u64,
    #[fingerprint(env)]
    #[serde(default)]
    sleep_ms: u64,
}

#[derive(serde::Serialize, Snapshot)]
struct Receipt {
    #[snapshot(biz_no)]
    id: String,
    operation_id: String,
}

/// What the handler did: the operation id of each run.
#[derive(Clone, Default)]
struct Effects(Arc<Mutex<Vec<String>>>);

impl Effects {
    fn ops(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Its effect (the operation id recorded) first, then `sleep_ms`, then the answer.
#[idempotent(scope = global, operation = "tests.actix.order", lease = "30s")]
async fn order(
    effects: web::Data<Effects>,
    req: web::Json<Order>,
) -> (web::Json<Receipt>, StatusCode) {
    let op = idem::operation_id()
        .expect("set inside the handler")
        .to_string();
    effects.0.lock().unwrap().push(op.clone());
    actix_web::rt::time::sleep(Duration::from_millis(req.sleep_ms)).await;
    let id = format!("ord_{}", req.amount);
    (
        web::Json(Receipt {
            id,
            operation_id: op,
        }),
        StatusCode::CREATED,
    )
}

/// The client sends its request, the handler does its effect, and the client closes the socket
/// before the answer. The record keeps the operation id: the retry continues that operation
/// (the handler again under the same id, or the stored answer of the first run), never a
/// second one.
async fn client_hanging_up_after_the_effect_keeps_its_operation(fx: &Fixture) {
    use tokio::io::AsyncWriteExt;
    let effects = Effects::default();
    let idem = Idem::from_arc(fx.store.clone());
    let data = web::Data::new(effects.clone());
    let s = Served::start(move || {
        App::new()
            .app_data(web::Data::new(idem.clone()))
            .app_data(data.clone())
            .app_data(idem::actix::json_config())
            .route("/orders", web::post().to(order))
    });
    let key = unique("hangup");
    let slow = r#"{"amount":100,"sleep_ms":2000}"#;
    let mut client = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let request = format!(
        "POST /orders HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Idempotency-Key: {key}\r\nContent-Length: {}\r\n\r\n{slow}",
        s.addr,
        slow.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    for _ in 0..1000 {
        if !effects.ops().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(effects.ops().len(), 1, "the handler did not start");
    drop(client);
    let first = effects.ops()[0].clone();
    let fast = r#"{"amount":100}"#;
    let headers = [("Idempotency-Key", key.as_str())];
    let mut answer = send(s.addr, "POST", "/orders", &headers, Some(fast)).await;
    for _ in 0..500 {
        if answer.status != 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        answer = send(s.addr, "POST", "/orders", &headers, Some(fast)).await;
    }
    assert_eq!(answer.status, 201, "{}", answer.text());
    let body: Value = answer.json();
    assert_eq!(body["operation_id"], json!(first), "a second operation");
    let ops = effects.ops();
    assert!(ops.iter().all(|op| *op == first), "{ops:?}");
}

// ---------------------------------------------------------------- waiting for the first attempt

/// Waits up to 10 s for the first attempt (`tests/it/wait.rs`, on actix-web).
#[idempotent(scope = global, wait = "10s", lease = "5s")]
async fn waits(
    app: web::Data<crate::wait::App>,
    req: web::Json<crate::wait::CreatePayment>,
) -> (web::Json<crate::wait::Payment>, StatusCode) {
    let payment = crate::wait::pay(&app, req.into_inner()).await;
    (web::Json(payment), StatusCode::CREATED)
}

#[idempotent(scope = global, ttl = "1h", remember = "10h", lease = "5s")]
async fn remembers(
    app: web::Data<crate::wait::App>,
    req: web::Json<crate::wait::CreatePayment>,
) -> (web::Json<crate::wait::Payment>, StatusCode) {
    let payment = crate::wait::pay(&app, req.into_inner()).await;
    (web::Json(payment), StatusCode::CREATED)
}

async fn remembered_over_a_socket(fx: &Fixture) {
    let idem = Idem::from_arc(fx.store.clone());
    let app = crate::wait::App::new(idem.clone(), usize::MAX >> 4);
    let data = web::Data::new(app.clone());
    let s = Served::start(move || {
        App::new()
            .app_data(web::Data::new(idem.clone()))
            .app_data(data.clone())
            .app_data(idem::actix::json_config())
            .route("/remembers", web::post().to(remembers))
    });
    crate::remember::remembered_over_a_socket(s.addr, "/remembers", &app, fx.clock()).await;
}

backend_tests!(
    2,
    on_clocked_store,
    [memory, sqlite, postgres, mysql, redis],
    remembered_over_a_socket,
);

async fn duplicates_wait_over_a_socket(fx: &Fixture) {
    let idem = Idem::from_arc(fx.store.clone());
    let app = crate::wait::App::new(idem.clone(), 0);
    let (data, handle) = (web::Data::new(app.clone()), idem.clone());
    let s = Served::start(move || {
        App::new()
            .app_data(web::Data::new(handle.clone()))
            .app_data(data.clone())
            .app_data(idem::actix::json_config())
            .route("/waits", web::post().to(waits))
    });
    let hang_up = crate::wait::HangUp::RunsOn;
    crate::wait::waiters_over_a_socket(s.addr, "/waits", &app, &idem, hang_up).await;
}

// ---------------------------------------------------------------- what counts as the request

#[derive(Fingerprint, serde::Deserialize)]
struct PayoutOptions {
    dry_run: Option<bool>,
}

/// The account (a path parameter) and the query are hashed with the body.
#[idempotent(scope = global, operation = "tests.actix.payout")]
async fn payout(
    effects: web::Data<Effects>,
    account: web::Path<String>,
    options: web::Query<PayoutOptions>,
    req: web::Json<Order>,
) -> (web::Json<Receipt>, StatusCode) {
    effects.0.lock().unwrap().push(account.clone());
    let id = format!("po_{account}_{}_{:?}", req.amount, options.dry_run);
    let operation_id = idem::operation_id().unwrap().to_string();
    (web::Json(Receipt { id, operation_id }), StatusCode::CREATED)
}

/// The same key and body to another account, or without `?dry_run=true`, is another request:
/// `422`, never the first request's answer.
#[tokio::test]
async fn path_and_query_are_part_of_the_request() {
    let effects = Effects::default();
    let idem = Idem::new(idem::MemoryStore::new());
    let data = web::Data::new(effects.clone());
    let s = Served::start(move || {
        App::new()
            .app_data(web::Data::new(idem.clone()))
            .app_data(data.clone())
            .app_data(idem::actix::json_config())
            .route("/accounts/{account}/payouts", web::post().to(payout))
    });
    let body = Some(r#"{"amount":5}"#);
    let headers = [("Idempotency-Key", "k-po")];
    let first = send(
        s.addr,
        "POST",
        "/accounts/A/payouts?dry_run=true",
        &headers,
        body,
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.text());
    let again = send(
        s.addr,
        "POST",
        "/accounts/A/payouts?dry_run=true",
        &headers,
        body,
    )
    .await;
    assert_eq!((again.status, again.text()), (201, first.text()));
    let other = send(
        s.addr,
        "POST",
        "/accounts/B/payouts?dry_run=true",
        &headers,
        body,
    )
    .await;
    assert_eq!(other.status, 422, "{}", other.text());
    let real = send(s.addr, "POST", "/accounts/A/payouts", &headers, body).await;
    assert_eq!(real.status, 422, "{}", real.text());
    assert_eq!(effects.ops(), ["A"]);
}
