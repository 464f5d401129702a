//! The HTTP engine end to end: an axum `Router` in process (`tower::ServiceExt::oneshot`) whose
//! handlers call `idem::__private::run` by hand, exactly as `#[idempotent]` generates
//! them, over real stores: memory, SQLite (a file in a temporary directory), PostgreSQL and
//! MariaDB (when `IDEM_TEST_POSTGRES_URL` / `IDEM_TEST_MYSQL_URL` are set; `scripts/test` starts
//! the servers; under `CI=true` they must be).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::header::{
    AUTHORIZATION, CONTENT_TYPE, LOCATION, PROXY_AUTHORIZATION, RETRY_AFTER, SET_COOKIE,
};
use axum::http::{HeaderName, Request, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::{Json as AxumJson, Router};
use http_body_util::BodyExt;
use idem::__private::{Call, Mode, run};
use idem::MemoryStore;
use idem::ScopePart;
use idem::SqliteStore;
use idem::axum::{IdemContext, Json};
use idem::http::KeySource;
use idem::key::scoped_key;
use idem::store::{Claim, ClaimRequest, Store};
use idem::{Contract, Fingerprint, HandlerConfig, Idem, RequestHash, Snapshot, operation_id};
use tower::ServiceExt;

use crate::backends::{Fixture, backend_tests, on_clocked_store};
use crate::servers::unique;

// ---------------------------------------------------------------- the application

#[derive(Clone)]
struct App {
    idem: Idem,
    hits: Arc<AtomicUsize>,
    lookups: Arc<Mutex<Vec<String>>>,
    orders: Arc<Mutex<HashMap<String, Order>>>,
    seen_ops: Arc<Mutex<Vec<String>>>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

impl App {
    fn new(store: Arc<dyn Store>) -> Self {
        App {
            idem: Idem::from_arc(store),
            hits: Arc::default(),
            lookups: Arc::default(),
            orders: Arc::default(),
            seen_ops: Arc::default(),
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn router(&self) -> Router {
        Router::new()
            .route("/payments", post(create_payment))
            .route("/payments/open", post(create_payment_fail_open))
            .route("/payments/short", post(create_payment_short_ttl))
            .route("/payments/suppressed", post(create_payment_suppressed))
            .route("/payments/timeout", post(create_payment_timeout))
            .route("/orders", post(place_order))
            .route("/refunds", post(create_refund))
            .route("/reports", post(create_report))
            .with_state(self.clone())
    }
}

#[derive(Fingerprint, serde::Deserialize)]
struct CreatePayment {
    amount: u64,
    currency: String,
    #[fingerprint(skip)]
    #[serde(default)]
    sleep_ms: u64,
}

#[derive(serde::Serialize)]
struct Payment {
    id: String,
    amount: u64,
    currency: String,
    operation_id: String,
}

impl Snapshot for Payment {
    const BIZ_NO_FIELD: &'static str = "id";
    fn biz_no(&self) -> String {
        self.id.clone()
    }
}

type PaymentResponse =
    Result<(StatusCode, [(HeaderName, String); 5], AxumJson<Payment>), (StatusCode, String)>;

static CREATE: HandlerConfig = HandlerConfig::new("tests::create_payment")
    .lease(Duration::from_secs(30))
    // The credentials are listed on purpose (in any case): they must be dropped anyway.
    .replay_headers(&[
        "x-extra",
        "set-cookie",
        "Authorization",
        "PROXY-AUTHORIZATION",
    ]);
static CREATE_OPEN: HandlerConfig = HandlerConfig::new("tests::create_payment").fail_open(true);
static CREATE_SHORT: HandlerConfig =
    HandlerConfig::new("tests::create_payment_short").ttl(Duration::from_secs(60));
static CREATE_SUPPRESSED: HandlerConfig =
    HandlerConfig::new("tests::create_payment_suppressed").contract(Contract::SuppressOnly);
static CREATE_TIMEOUT: HandlerConfig = HandlerConfig::new("tests::create_payment_timeout")
    .lease(Duration::from_secs(30))
    .timeout(Duration::from_millis(300));

async fn payment(app: App, req: CreatePayment) -> PaymentResponse {
    app.hits.fetch_add(1, Ordering::SeqCst);
    let op = operation_id().expect("the operation id is set inside the handler");
    app.seen_ops.lock().unwrap().push(op.to_string());
    if req.sleep_ms > 0 {
        tokio::time::sleep(Duration::from_millis(req.sleep_ms)).await;
    }
    match req.amount {
        0 => return Err((StatusCode::BAD_REQUEST, "amount must be positive".into())),
        500 => return Err((StatusCode::INTERNAL_SERVER_ERROR, "ledger down".into())),
        _ => {}
    }
    let id = format!("pay_{}", &op.as_str()[..8]);
    Ok((
        StatusCode::CREATED,
        [
            (LOCATION, format!("/payments/{id}")),
            (SET_COOKIE, "session=secret".into()),
            (AUTHORIZATION, "Bearer secret".into()),
            (PROXY_AUTHORIZATION, "Basic secret".into()),
            (HeaderName::from_static("x-extra"), "kept".into()),
        ],
        AxumJson(Payment {
            id,
            amount: req.amount,
            currency: req.currency,
            operation_id: op.to_string(),
        }),
    ))
}

fn tenant(cx: &IdemContext) -> String {
    idem::key::write_scope_part(&cx.header("x-tenant"))
}

/// The payment handler under `cfg`, its keys scoped by tenant or not.
async fn create_payment_with(
    cfg: &'static HandlerConfig,
    by_tenant: bool,
    cx: IdemContext,
    app: App,
    req: CreatePayment,
) -> Response {
    let hash = req.fingerprint();
    let tenant = if by_tenant {
        tenant(&cx)
    } else {
        String::new()
    };
    let scope: &[&dyn ScopePart] = if by_tenant { &[&tenant] } else { &[] };
    let call = Call {
        config: cfg,
        key: KeySource::Header("Idempotency-Key"),
        scope,
        hash,
    };
    run(cx, call, Mode::stored(), payment(app, req)).await
}

/// An axum handler running [`create_payment_with`] under one configuration.
macro_rules! payment_handler {
    ($name:ident, $cfg:expr, by_tenant: $by_tenant:expr) => {
        async fn $name(
            cx: IdemContext,
            State(app): State<App>,
            Json(req): Json<CreatePayment>,
        ) -> Response {
            create_payment_with($cfg, $by_tenant, cx, app, req).await
        }
    };
}

payment_handler!(create_payment, &CREATE, by_tenant: true);
payment_handler!(create_payment_fail_open, &CREATE_OPEN, by_tenant: true);
payment_handler!(create_payment_short_ttl, &CREATE_SHORT, by_tenant: false);
payment_handler!(create_payment_suppressed, &CREATE_SUPPRESSED, by_tenant: false);
payment_handler!(create_payment_timeout, &CREATE_TIMEOUT, by_tenant: false);

// latest_state: orders

#[derive(Fingerprint, serde::Deserialize)]
struct PlaceOrder {
    sku: String,
}

#[derive(Clone, serde::Serialize)]
struct Order {
    order_no: String,
    sku: String,
    status: String,
}

impl Snapshot for Order {
    const BIZ_NO_FIELD: &'static str = "order_no";
    fn biz_no(&self) -> String {
        self.order_no.clone()
    }
}

static PLACE: HandlerConfig =
    HandlerConfig::new("tests::place_order").contract(Contract::LatestState);

async fn place_order(
    cx: IdemContext,
    State(app): State<App>,
    Json(req): Json<PlaceOrder>,
) -> Response {
    let hash = req.fingerprint();
    let lookup = {
        let app = app.clone();
        move |order_no: String| async move {
            app.lookups.lock().unwrap().push(order_no.clone());
            let order = app.orders.lock().unwrap().get(&order_no).cloned();
            order.map(AxumJson).ok_or(StatusCode::NOT_FOUND)
        }
    };
    let call = Call {
        config: &PLACE,
        key: KeySource::Header("Idempotency-Key"),
        scope: &[],
        hash,
    };
    run(cx, call, Mode::latest(lookup), async move {
        app.hits.fetch_add(1, Ordering::SeqCst);
        let order = Order {
            order_no: unique("ord"),
            sku: req.sku,
            status: "placed".into(),
        };
        app.orders
            .lock()
            .unwrap()
            .insert(order.order_no.clone(), order.clone());
        (StatusCode::CREATED, AxumJson(order))
    })
    .await
}

// suppress_only: refunds

#[derive(Fingerprint, serde::Deserialize)]
struct CreateRefund {
    payment: String,
}

#[derive(serde::Serialize)]
struct Refund {
    refund_id: String,
    payment: String,
    note: &'static str,
}

impl Snapshot for Refund {
    const BIZ_NO_FIELD: &'static str = "refund_id";
    fn biz_no(&self) -> String {
        self.refund_id.clone()
    }
}

static REFUND: HandlerConfig =
    HandlerConfig::new("tests::create_refund").contract(Contract::SuppressOnly);

async fn create_refund(
    cx: IdemContext,
    State(app): State<App>,
    Json(req): Json<CreateRefund>,
) -> Response {
    let hash = req.fingerprint();
    let call = Call {
        config: &REFUND,
        key: KeySource::Header("Idempotency-Key"),
        scope: &[],
        hash,
    };
    run(cx, call, Mode::stored(), async move {
        app.hits.fetch_add(1, Ordering::SeqCst);
        (
            StatusCode::CREATED,
            Json(Refund {
                refund_id: "re_1".into(),
                payment: req.payment,
                note: "full refund",
            }),
        )
    })
    .await
}

// a large body: the snapshot is truncated to its key fields and the business number

#[derive(serde::Serialize)]
struct Report {
    report_no: String,
    status: String,
    rows: Vec<String>,
}

impl Snapshot for Report {
    const BIZ_NO_FIELD: &'static str = "report_no";
    fn biz_no(&self) -> String {
        self.report_no.clone()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![("status", self.status.clone().into())]
    }
}

static REPORT: HandlerConfig = HandlerConfig::new("tests::report").max_snapshot_bytes(1024);

async fn create_report(cx: IdemContext, State(app): State<App>) -> Response {
    let hash = RequestHash::of_bytes(b"{}");
    let call = Call {
        config: &REPORT,
        key: KeySource::Header("Idempotency-Key"),
        scope: &[],
        hash,
    };
    run(cx, call, Mode::stored(), async move {
        app.hits.fetch_add(1, Ordering::SeqCst);
        AxumJson(Report {
            report_no: "rep_7".into(),
            status: "ready".into(),
            rows: (0..200).map(|i| format!("row number {i}")).collect(),
        })
    })
    .await
}

// ---------------------------------------------------------------- helpers

fn post_json(path: &str, key: Option<&str>, body: &str) -> Request<Body> {
    let mut req = Request::post(path).header(CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    req.body(Body::from(body.to_owned())).unwrap()
}

fn with_tenant(mut req: Request<Body>, tenant: &str) -> Request<Body> {
    req.headers_mut()
        .insert("x-tenant", tenant.parse().unwrap());
    req
}

async fn send(app: &App, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let resp = app.router().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes().to_vec();
    (parts.status, parts.headers, bytes)
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// Checks a problem+json response and returns its body.
fn problem(
    status: StatusCode,
    headers: &axum::http::HeaderMap,
    body: &[u8],
    expected: StatusCode,
    slug: &str,
) -> serde_json::Value {
    assert_eq!(status, expected, "{}", String::from_utf8_lossy(body));
    assert_eq!(headers[CONTENT_TYPE], "application/problem+json");
    let p = json(body);
    assert_eq!(
        p["type"],
        format!("https://docs.rs/idem/latest/idem/problem/index.html#{slug}")
    );
    assert_eq!(p["status"], expected.as_u16());
    assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(p["detail"].as_str().is_some_and(|d| !d.is_empty()));
    p
}

fn retry_after(headers: &axum::http::HeaderMap) -> u64 {
    headers[RETRY_AFTER].to_str().unwrap().parse().unwrap()
}

const PAY: &str = r#"{"amount":100,"currency":"EUR"}"#;

// ---------------------------------------------------------------- the suite

backend_tests!(
    4,
    on_clocked_store,
    [memory, sqlite, postgres, mysql],
    missing_key_is_400,
    invalid_keys_are_400,
    sf_string_and_bare_keys_are_equivalent,
    first_call_runs_and_replay_is_byte_identical,
    other_body_same_key_is_422,
    concurrent_duplicate_is_409_with_retry_after,
    in_progress_with_other_body_is_422,
    fifty_concurrent_requests_run_the_handler_once,
    validation_failure_releases_the_key,
    server_error_is_stored_and_replayed,
    latest_state_replays_the_current_state,
    suppress_only_replays_the_business_number,
    replays_keep_listed_headers_never_credentials,
    oversized_snapshot_keeps_the_key_fields,
    operation_id_is_stable_across_a_takeover,
    same_key_in_two_tenants_is_two_operations,
    ttl_expiry_runs_afresh,
    dropped_request_keeps_its_operation,
    client_disconnecting_over_tcp_keeps_its_operation,
    server_error_under_suppress_only_keeps_its_operation,
    hung_handler_times_out_and_the_retry_continues,
);

async fn missing_key_is_400(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let tenant = unique("nokey");
    let (status, headers, body) = send(
        &app,
        with_tenant(post_json("/payments", None, PAY), &tenant),
    )
    .await;
    let p = problem(
        status,
        &headers,
        &body,
        StatusCode::BAD_REQUEST,
        "missing-key",
    );
    assert!(
        p["detail"].as_str().unwrap().contains("Idempotency-Key"),
        "{p}"
    );
    assert_eq!(app.hits(), 0);
    assert_eq!(
        fx.records().containing(&tenant).await,
        0,
        "a record was stored"
    );
}

async fn invalid_keys_are_400(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let tenant = unique("badkey");
    let long = "k".repeat(256);
    let quoted_long = format!("\"{}\"", "k".repeat(256));
    let cases: [&[u8]; 13] = [
        b"",
        b"\"\"",
        long.as_bytes(),
        quoted_long.as_bytes(),
        b"ab\tcd",
        b"\"ab\tcd\"",
        b"\"abc",
        br#""a\x""#,
        b"two words",
        // Not UTF-8, or not ASCII: bare and quoted.
        b"k\xff",
        b"\"k\xc3\xa9\"",
        "cl\u{e9}".as_bytes(),
        b"k1, k2",
    ];
    for key in cases {
        let mut req = with_tenant(post_json("/payments", None, PAY), &tenant);
        req.headers_mut().insert(
            "idempotency-key",
            axum::http::HeaderValue::from_bytes(key).unwrap(),
        );
        let (status, headers, body) = send(&app, req).await;
        let p = problem(
            status,
            &headers,
            &body,
            StatusCode::BAD_REQUEST,
            "invalid-key",
        );
        assert!(
            p.get("idempotency_key").is_none(),
            "an invalid key echoed: {p}"
        );
    }
    // The header sent twice, even with one value: which one would count?
    let key = unique("twice");
    let mut req = with_tenant(post_json("/payments", Some(&key), PAY), &tenant);
    req.headers_mut()
        .append("idempotency-key", key.parse().unwrap());
    let (status, headers, body) = send(&app, req).await;
    problem(
        status,
        &headers,
        &body,
        StatusCode::BAD_REQUEST,
        "invalid-key",
    );
    assert_eq!(app.hits(), 0);
    assert_eq!(
        fx.records().containing(&tenant).await,
        0,
        "a record was stored"
    );
    // 255 characters are fine.
    let ok = unique("k");
    let ok = format!("{ok}{}", "k".repeat(255 - ok.len()));
    let (status, ..) = send(
        &app,
        with_tenant(post_json("/payments", Some(&ok), PAY), &tenant),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(app.hits(), 1);
    assert_eq!(fx.records().containing(&tenant).await, 1);
}

async fn sf_string_and_bare_keys_are_equivalent(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("eq");
    let (s1, _, b1) = send(
        &app,
        post_json("/payments", Some(&format!("\"{key}\"")), PAY),
    )
    .await;
    let (s2, h2, b2) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::CREATED));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(b1, b2);
    assert_eq!(app.hits(), 1);
}

async fn first_call_runs_and_replay_is_byte_identical(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("replay");
    let (s1, h1, b1) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    assert_eq!(s1, StatusCode::CREATED);
    assert!(h1.get("idempotent-replayed").is_none());
    // The same request written differently (member order, spaces) is the same request.
    let same = r#"{ "currency": "EUR", "amount": 100 }"#;
    let (s2, h2, b2) = send(&app, post_json("/payments", Some(&key), same)).await;
    assert_eq!(s2, s1);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(h2[LOCATION], h1[LOCATION]);
    assert_eq!(h2[CONTENT_TYPE], h1[CONTENT_TYPE]);
    assert_eq!(b2, b1);
    assert_eq!(app.hits(), 1);
    let first = json(&b1);
    assert_eq!(first["amount"], 100);
    assert!(first["id"].as_str().unwrap().starts_with("pay_"));
}

async fn other_body_same_key_is_422(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("reuse");
    let (s1, ..) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    assert_eq!(s1, StatusCode::CREATED);
    let other = r#"{"amount":200,"currency":"EUR"}"#;
    let (status, headers, body) = send(&app, post_json("/payments", Some(&key), other)).await;
    let p = problem(
        status,
        &headers,
        &body,
        StatusCode::UNPROCESSABLE_ENTITY,
        "key-reused",
    );
    assert_eq!(p["idempotency_key"], key.as_str());
    assert!(headers.get("idempotent-replayed").is_none());
    assert_eq!(app.hits(), 1);
}

async fn concurrent_duplicate_is_409_with_retry_after(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("busy");
    let slow = r#"{"amount":100,"currency":"EUR","sleep_ms":700}"#;
    let first = tokio::spawn({
        let app = app.clone();
        let req = post_json("/payments", Some(&key), slow);
        async move { send(&app, req).await }
    });
    wait_for_hits(&app, 1).await;
    let (status, headers, body) = send(&app, post_json("/payments", Some(&key), slow)).await;
    let p = problem(status, &headers, &body, StatusCode::CONFLICT, "in-progress");
    let wait = retry_after(&headers);
    assert!(wait >= 1, "Retry-After {wait}");
    assert_eq!(p["retry_after"], wait);
    let (s1, ..) = first.await.unwrap();
    assert_eq!(s1, StatusCode::CREATED);
    assert_eq!(app.hits(), 1);
}

async fn in_progress_with_other_body_is_422(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("busy-other");
    let slow = r#"{"amount":100,"currency":"EUR","sleep_ms":700}"#;
    let first = tokio::spawn({
        let app = app.clone();
        let req = post_json("/payments", Some(&key), slow);
        async move { send(&app, req).await }
    });
    wait_for_hits(&app, 1).await;
    let other = r#"{"amount":300,"currency":"EUR"}"#;
    let (status, headers, body) = send(&app, post_json("/payments", Some(&key), other)).await;
    problem(
        status,
        &headers,
        &body,
        StatusCode::UNPROCESSABLE_ENTITY,
        "key-reused",
    );
    assert_eq!(first.await.unwrap().0, StatusCode::CREATED);
    assert_eq!(app.hits(), 1);
}

async fn wait_for_hits(app: &App, n: usize) {
    for _ in 0..500 {
        if app.hits() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the handler did not start");
}

async fn fifty_concurrent_requests_run_the_handler_once(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("fifty");
    let slow = r#"{"amount":100,"currency":"EUR","sleep_ms":300}"#;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let app = app.clone();
            let req = post_json("/payments", Some(&key), slow);
            tokio::spawn(async move { send(&app, req).await })
        })
        .collect();
    let mut created = 0;
    let mut conflicts = 0;
    for t in tasks {
        let (status, headers, _) = t.await.unwrap();
        match status {
            StatusCode::CREATED => created += 1,
            StatusCode::CONFLICT => {
                assert!(retry_after(&headers) >= 1);
                conflicts += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(app.hits(), 1, "the handler ran more than once");
    assert!(created >= 1);
    assert_eq!(created + conflicts, 50);
}

async fn validation_failure_releases_the_key(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("invalid");
    let bad = r#"{"amount":0,"currency":"EUR"}"#;
    let (s1, h1, _) = send(&app, post_json("/payments", Some(&key), bad)).await;
    assert_eq!(s1, StatusCode::BAD_REQUEST);
    assert!(h1.get("idempotent-replayed").is_none());
    // Nothing was saved: the corrected request runs under the same key.
    let (s2, h2, _) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    assert_eq!(s2, StatusCode::CREATED);
    assert!(h2.get("idempotent-replayed").is_none());
    assert_eq!(app.hits(), 2);
}

async fn server_error_is_stored_and_replayed(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("500");
    let boom = r#"{"amount":500,"currency":"EUR"}"#;
    let (s1, h1, b1) = send(&app, post_json("/payments", Some(&key), boom)).await;
    assert_eq!(s1, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(h1.get("idempotent-replayed").is_none());
    let (s2, h2, b2) = send(&app, post_json("/payments", Some(&key), boom)).await;
    assert_eq!(s2, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(b2, b1);
    assert_eq!(app.hits(), 1);
}

async fn latest_state_replays_the_current_state(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("latest");
    let body = r#"{"sku":"sku-1"}"#;
    let (s1, _, b1) = send(&app, post_json("/orders", Some(&key), body)).await;
    assert_eq!(s1, StatusCode::CREATED);
    let order_no = json(&b1)["order_no"].as_str().unwrap().to_owned();
    app.orders
        .lock()
        .unwrap()
        .get_mut(&order_no)
        .unwrap()
        .status = "shipped".into();
    let (s2, h2, b2) = send(&app, post_json("/orders", Some(&key), body)).await;
    assert_eq!(s2, StatusCode::OK);
    assert_eq!(h2["idempotent-replayed"], "true");
    let current = json(&b2);
    assert_eq!(current["status"], "shipped");
    assert_eq!(current["order_no"], order_no.as_str());
    assert_eq!(*app.lookups.lock().unwrap(), [order_no]);
    assert_eq!(app.hits(), 1);
}

async fn suppress_only_replays_the_business_number(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("suppress");
    let body = r#"{"payment":"pay_1"}"#;
    let (s1, _, b1) = send(&app, post_json("/refunds", Some(&key), body)).await;
    assert_eq!(s1, StatusCode::CREATED);
    assert_eq!(json(&b1)["note"], "full refund");
    let (s2, h2, b2) = send(&app, post_json("/refunds", Some(&key), body)).await;
    assert_eq!(s2, StatusCode::OK);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(h2[CONTENT_TYPE], "application/json");
    assert_eq!(b2, br#"{"refund_id":"re_1"}"#);
    assert_eq!(app.hits(), 1);
}

async fn replays_keep_listed_headers_never_credentials(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("headers");
    let (_, h1, _) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    let (_, h2, _) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    for credential in [SET_COOKIE, AUTHORIZATION, PROXY_AUTHORIZATION] {
        // The first caller gets everything; a replay never carries a credential.
        assert!(h1.contains_key(&credential), "{credential} not sent");
        assert!(!h2.contains_key(&credential), "{credential} replayed");
    }
    assert_eq!(h2["x-extra"], "kept");
    assert_eq!(h2[LOCATION], h1[LOCATION]);
    // Never stored either.
    let scoped = scoped_key(CREATE.operation().unwrap(), &[&""], &key).unwrap();
    let record = fx.store.get(&scoped).await.unwrap().unwrap();
    let mut names: Vec<&str> = record.headers.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["content-type", "location", "x-extra"]);
    assert!(
        record
            .biz_no
            .as_deref()
            .is_some_and(|b| b.starts_with("pay_"))
    );
}

async fn oversized_snapshot_keeps_the_key_fields(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("big");
    let req = || {
        Request::post("/reports")
            .header("idempotency-key", &key)
            .body(Body::empty())
            .unwrap()
    };
    let (s1, _, b1) = send(&app, req()).await;
    assert_eq!(s1, StatusCode::OK);
    assert!(b1.len() > 1024, "{}", b1.len());
    assert_eq!(json(&b1)["rows"].as_array().unwrap().len(), 200);
    let (s2, h2, b2) = send(&app, req()).await;
    assert_eq!(s2, StatusCode::OK);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(h2["idempotent-snapshot"], "truncated");
    assert_eq!(h2[CONTENT_TYPE], "application/json");
    assert_eq!(b2, br#"{"report_no":"rep_7","status":"ready"}"#);
    assert_eq!(app.hits(), 1);
}

async fn operation_id_is_stable_across_a_takeover(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("takeover");
    // A first attempt claimed the key and crashed (its lease is never completed nor released).
    let scoped = scoped_key(CREATE.operation().unwrap(), &[&""], &key).unwrap();
    let hash = serde_json::from_str::<CreatePayment>(PAY)
        .unwrap()
        .fingerprint();
    let lease = match fx
        .store
        .claim(&ClaimRequest::new(
            &scoped,
            hash,
            Duration::from_secs(5),
            Duration::from_secs(3600),
        ))
        .await
        .unwrap()
    {
        Claim::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    // While its lease lives, a retry is told to wait.
    let (status, headers, _) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(retry_after(&headers) >= 1);
    // After it, the retry takes the operation over, with the same operation id.
    fx.clock().advance(Duration::from_secs(6));
    let (status, _, body) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(json(&body)["operation_id"], lease.operation_id.as_str());
    assert_eq!(*app.seen_ops.lock().unwrap(), [lease.operation_id]);
}

async fn same_key_in_two_tenants_is_two_operations(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("tenants");
    let (s1, _, b1) = send(
        &app,
        with_tenant(post_json("/payments", Some(&key), PAY), "acme"),
    )
    .await;
    let (s2, h2, b2) = send(
        &app,
        with_tenant(post_json("/payments", Some(&key), PAY), "globex"),
    )
    .await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::CREATED));
    assert!(h2.get("idempotent-replayed").is_none());
    assert_ne!(json(&b1)["operation_id"], json(&b2)["operation_id"]);
    assert_eq!(app.hits(), 2);
    // Within one tenant it is still one operation.
    let (_, h3, b3) = send(
        &app,
        with_tenant(post_json("/payments", Some(&key), PAY), "acme"),
    )
    .await;
    assert_eq!(h3["idempotent-replayed"], "true");
    assert_eq!(b3, b1);
}

async fn ttl_expiry_runs_afresh(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("ttl");
    let (s1, _, b1) = send(&app, post_json("/payments/short", Some(&key), PAY)).await;
    assert_eq!(s1, StatusCode::CREATED);
    fx.clock().advance(Duration::from_secs(59));
    let (_, h2, _) = send(&app, post_json("/payments/short", Some(&key), PAY)).await;
    assert_eq!(h2["idempotent-replayed"], "true");
    fx.clock().advance(Duration::from_secs(2));
    let (s3, h3, b3) = send(&app, post_json("/payments/short", Some(&key), PAY)).await;
    assert_eq!(s3, StatusCode::CREATED);
    assert!(h3.get("idempotent-replayed").is_none());
    assert_ne!(json(&b3)["operation_id"], json(&b1)["operation_id"]);
    assert_eq!(app.hits(), 2);
}

/// Sends `req` again until it is not `409` (the abandoned record is released to a takeover in
/// the background, a few milliseconds after the first request ended).
async fn retry_past_409(app: &App, req: impl Fn() -> Request<Body>) -> (StatusCode, Vec<u8>) {
    for _ in 0..300 {
        let (status, _, body) = send(app, req()).await;
        if status != StatusCode::CONFLICT {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("still 409 after 3 s: the first attempt's lease was not ended");
}

async fn dropped_request_keeps_its_operation(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("gone");
    let slow = r#"{"amount":100,"currency":"EUR","sleep_ms":10000}"#;
    // The client goes away (or a timeout layer fires): the request future is dropped while the
    // handler sleeps, after it started its work under its operation id.
    let gone = tokio::time::timeout(
        Duration::from_millis(200),
        send(&app, post_json("/payments", Some(&key), slow)),
    )
    .await;
    assert!(gone.is_err());
    assert_eq!(app.hits(), 1);
    // The record is kept and its lease ended: the retry takes it over at once (no 409 for the
    // 30 s lease) and continues the same operation.
    let fast = r#"{"amount":100,"currency":"EUR"}"#;
    let (status, body) = retry_past_409(&app, || post_json("/payments", Some(&key), fast)).await;
    assert_eq!(status, StatusCode::CREATED);
    let ops = app.seen_ops.lock().unwrap().clone();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!(
        ops[0], ops[1],
        "the retry must run under the first attempt's operation id"
    );
    assert_eq!(json(&body)["operation_id"], ops[0].as_str());
}

async fn client_disconnecting_over_tcp_keeps_its_operation(fx: &Fixture) {
    use tokio::io::AsyncWriteExt;
    let app = App::new(fx.store.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, app.router()).into_future());
    let key = unique("tcp");
    let slow = r#"{"amount":100,"currency":"EUR","sleep_ms":10000}"#;
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /payments HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         idempotency-key: {key}\r\ncontent-length: {}\r\n\r\n{slow}",
        slow.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    wait_for_hits(&app, 1).await;
    // The client hangs up mid-handler; the server notices and drops the request.
    drop(client);
    let fast = r#"{"amount":100,"currency":"EUR"}"#;
    let (status, body) = retry_past_409(&app, || post_json("/payments", Some(&key), fast)).await;
    assert_eq!(status, StatusCode::CREATED);
    let ops = app.seen_ops.lock().unwrap().clone();
    assert_eq!(ops.len(), 2, "the retry ran the handler again: {ops:?}");
    assert_eq!(ops[0], ops[1]);
    assert_eq!(json(&body)["operation_id"], ops[0].as_str());
    server.abort();
}

async fn server_error_under_suppress_only_keeps_its_operation(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("suppressed-500");
    let failing = r#"{"amount":500,"currency":"EUR"}"#;
    let (status, _, _) = send(&app, post_json("/payments/suppressed", Some(&key), failing)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    // Not stored (suppress_only keeps successes only) but not forgotten: the retry runs again,
    // at once, under the same operation id; part of the work may have been done.
    let (status, _, _) = send(&app, post_json("/payments/suppressed", Some(&key), failing)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let ops = app.seen_ops.lock().unwrap().clone();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!(ops[0], ops[1]);
    // Another payload under the key is still refused: the operation is not over.
    let other = r#"{"amount":7,"currency":"EUR"}"#;
    let (status, headers, body) =
        send(&app, post_json("/payments/suppressed", Some(&key), other)).await;
    problem(
        status,
        &headers,
        &body,
        StatusCode::UNPROCESSABLE_ENTITY,
        "key-reused",
    );
}

async fn hung_handler_times_out_and_the_retry_continues(fx: &Fixture) {
    let app = App::new(fx.store.clone());
    let key = unique("hung");
    let hung = r#"{"amount":100,"currency":"EUR","sleep_ms":60000}"#;
    let started = std::time::Instant::now();
    let (status, headers, body) =
        send(&app, post_json("/payments/timeout", Some(&key), hung)).await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "stopped at its timeout"
    );
    let p = problem(
        status,
        &headers,
        &body,
        StatusCode::SERVICE_UNAVAILABLE,
        "timed-out",
    );
    assert_eq!(retry_after(&headers), 1);
    assert_eq!(p["retry_after"], 1);
    // The retry takes the operation over at once, under the same operation id.
    let fast = r#"{"amount":100,"currency":"EUR"}"#;
    let (status, body) =
        retry_past_409(&app, || post_json("/payments/timeout", Some(&key), fast)).await;
    assert_eq!(status, StatusCode::CREATED);
    let ops = app.seen_ops.lock().unwrap().clone();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!(ops[0], ops[1]);
    assert_eq!(json(&body)["operation_id"], ops[0].as_str());
}

// ---------------------------------------------------------------- store unavailable (real)

/// A SQLite store whose pool is closed: every claim fails with `PoolClosed`.
async fn closed_sqlite() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    store.pool().close().await;
    (Arc::new(store), dir)
}

/// A PostgreSQL store pointed at a port nobody listens on.
fn unreachable_postgres() -> Arc<dyn Store> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("postgres://app:app@127.0.0.1:1/appdb")
        .unwrap();
    Arc::new(idem::PostgresStore::from_pool(pool))
}

async fn unavailable_is_503_and_the_handler_does_not_run(store: Arc<dyn Store>) {
    let app = App::new(store);
    let key = unique("down");
    let (status, headers, body) = send(&app, post_json("/payments", Some(&key), PAY)).await;
    let p = problem(
        status,
        &headers,
        &body,
        StatusCode::SERVICE_UNAVAILABLE,
        "store-unavailable",
    );
    assert!(retry_after(&headers) >= 1);
    assert_eq!(p["retry_after"], retry_after(&headers));
    assert_eq!(app.hits(), 0);
    // fail_open runs it, marked unprotected, with a fresh operation id.
    let (status, headers, body) = send(&app, post_json("/payments/open", Some(&key), PAY)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers["idempotency-status"], "unprotected");
    assert_eq!(json(&body)["operation_id"].as_str().unwrap().len(), 36);
    assert_eq!(app.hits(), 1);
}

#[tokio::test]
async fn sqlite_closed_pool_is_503() {
    let (store, _dir) = closed_sqlite().await;
    unavailable_is_503_and_the_handler_does_not_run(store).await;
}

#[tokio::test]
async fn postgres_closed_port_is_503() {
    unavailable_is_503_and_the_handler_does_not_run(unreachable_postgres()).await;
}

/// Replicas that do not acknowledge a claim in time (here a Redis server with none, asked for
/// one): the claim is not durable, so it is answered as an unavailable store.
#[tokio::test]
async fn redis_claim_short_of_replica_acks_is_503() {
    let Some(url) = crate::servers::server_url("IDEM_TEST_REDIS_URL") else {
        return;
    };
    let store = idem::RedisStore::connect(&url)
        .await
        .unwrap()
        .with_prefix(&format!("{}:", unique("acks")))
        .with_replica_acks(1, Duration::from_millis(100));
    store.migrate().await.unwrap();
    unavailable_is_503_and_the_handler_does_not_run(Arc::new(store)).await;
}

#[tokio::test]
async fn json_extractor_rejects_with_400_not_422() {
    let app = App::new(Arc::new(MemoryStore::new()));
    let key = unique("json");
    let (status, headers, body) = send(
        &app,
        post_json(
            "/payments",
            Some(&key),
            r#"{"amount":"x","currency":"EUR"}"#,
        ),
    )
    .await;
    problem(
        status,
        &headers,
        &body,
        StatusCode::BAD_REQUEST,
        "invalid-body",
    );
    let (status, headers, body) = send(&app, post_json("/payments", Some(&key), "{")).await;
    problem(
        status,
        &headers,
        &body,
        StatusCode::BAD_REQUEST,
        "invalid-body",
    );
    assert_eq!(app.hits(), 0);
}

#[tokio::test]
async fn the_handler_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (parts, ()) = Request::post("/")
        .header("idempotency-key", "k")
        .body(())
        .unwrap()
        .into_parts();
    let cx = IdemContext::new(Idem::new(MemoryStore::new()), &parts);
    let scope = String::from("acme");
    let call = Call {
        config: &CREATE,
        key: KeySource::Header("idempotency-key"),
        scope: &[&scope],
        hash: RequestHash::of_bytes(b"{}"),
    };
    let fut = run(cx, call, Mode::stored(), async {
        (
            StatusCode::CREATED,
            AxumJson(Payment {
                id: "p".into(),
                amount: 1,
                currency: "EUR".into(),
                operation_id: String::new(),
            }),
        )
    });
    drop(scope); // the future does not borrow the scope
    assert_send(&fut);
    assert_eq!(fut.await.status(), StatusCode::CREATED);
}
