//! Hostile input and the security guarantees, through every front (`#[idempotent]` handlers, the
//! tower `IdempotencyLayer`, `run_once`) over real stores: memory, SQLite (a file in a temporary
//! directory), PostgreSQL and MariaDB (when `IDEM_TEST_POSTGRES_URL` / `IDEM_TEST_MYSQL_URL` are
//! set; `scripts/test` starts the servers; under `CI=true` they must be).
//!
//! Every hostile request gets a clear `4xx` and leaves nothing behind: the tests look at the store
//! itself afterwards (`common/records.rs`: no record under the test's own marker, or the record
//! that was there untouched). Missing, invalid and repeated keys are checked with the front they
//! belong to (`http_engine.rs`, `http_layer.rs`, `engine_once.rs`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::header::{CONTENT_TYPE, LOCATION};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body::Frame;
use http_body_util::BodyExt;
use idem::ScopePart;
use idem::axum::{IntoSnapshot, Json};
use idem::json::Spec;
use idem::key::ScopedKey;
use idem::key::scoped_key;
use idem::{
    Fingerprint, HandlerConfig, Idem, IdempotencyError, IdempotencyLayer, Snapshot, idempotent,
    run_once,
};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::backends::{Fixture, backend_tests, on_store};
use crate::servers::unique;

// ---------------------------------------------------------------- stores

backend_tests!(
    2,
    on_store,
    [memory, sqlite, postgres, mysql],
    separators_in_scope_parts_never_merge_tenants,
    deep_nesting_is_400_and_stores_nothing,
    ten_mib_bodies_are_413_and_read_no_further_than_the_limit,
    huge_and_long_numbers_are_exact_or_refused,
    negative_zero_is_zero,
    duplicate_member_names_are_refused,
    invalid_utf8_bodies_are_400_and_store_nothing,
    over_limit_response_with_business_number_is_streamed_and_truncated,
    over_limit_response_without_business_number_is_stored_whole,
    another_tenants_key_never_returns_its_response,
    credentials_are_never_stored_nor_replayed,
    keys_are_stored_hashed_and_the_readable_key_decides_nothing,
    sql_metacharacters_are_data,
    control_characters_in_scope_parts_are_data,
    unstorable_business_number_is_left_out,
);

// ---------------------------------------------------------------- the application

#[derive(Clone)]
struct App {
    idem: Idem,
    /// How many times a handler body (or the layer's inner service) ran.
    runs: Arc<AtomicUsize>,
    /// A handler asked to `hold` waits for a permit.
    gate: Arc<Semaphore>,
    /// Chunks of export bodies pulled so far.
    pulled: Arc<AtomicUsize>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

impl App {
    fn new(fx: &Fixture) -> Self {
        App {
            idem: Idem::from_arc(fx.store.clone()),
            runs: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
            pulled: Arc::default(),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn pulled(&self) -> usize {
        self.pulled.load(Ordering::SeqCst)
    }

    /// The `#[idempotent]` handlers.
    fn attribute(&self) -> Router {
        Router::new()
            .route("/payments", post(create_payment))
            .route("/imports", post(import))
            .route("/exports", post(export))
            .with_state(self.clone())
    }

    /// The same service, unannotated, behind an `IdempotencyLayer` scoped by tenant and user.
    fn layered(&self) -> Router {
        let spec = Spec::from_json_str(
            r#"{"amount": "decimal", "currency": "any", "with_id": "any", "hold": "env"}"#,
        )
        .unwrap();
        let layer = IdempotencyLayer::new(self.idem.clone(), spec)
            .scope(|parts| Some(vec![header(parts, "x-tenant"), header(parts, "x-user")]))
            .config(
                HandlerConfig::for_route()
                    .replay_headers(&REPLAY_HEADERS)
                    .max_snapshot_bytes(SNAPSHOT_LIMIT),
            );
        Router::new()
            .route("/payments", post(layer_payment))
            .route("/exports", post(layer_export))
            .with_state(self.clone())
            .layer(layer)
    }
}

fn header(parts: &Parts, name: &str) -> String {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The caller, from `X-Tenant` and `X-User`: a stand-in for real authentication.
struct Caller {
    tenant: String,
    user: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = StatusCode;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        let get = |name| {
            parts
                .headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(str::to_owned)
                .ok_or(StatusCode::UNAUTHORIZED)
        };
        Ok(Caller {
            tenant: get("x-tenant")?,
            user: get("x-user")?,
        })
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    amount: Decimal,
    currency: String,
    /// Wait for the app's gate before answering (not part of the request's identity).
    #[serde(default)]
    #[fingerprint(skip)]
    hold: bool,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
    tenant: String,
    user: String,
    amount: Decimal,
    currency: String,
    operation_id: String,
}

/// Response headers that carry credentials: never stored nor replayed, even when listed.
const CREDENTIALS: [&str; 5] = [
    "set-cookie",
    "authorization",
    "proxy-authorization",
    "www-authenticate",
    "proxy-authenticate",
];

/// What the layer is asked to replay: the credentials (in mixed case) and one harmless header.
const REPLAY_HEADERS: [&str; 6] = [
    "Set-Cookie",
    "Authorization",
    "Proxy-Authorization",
    "WWW-Authenticate",
    "proxy-authenticate",
    "X-Kept",
];

/// The response headers every payment carries: a `Location`, the credentials, one harmless one.
fn payment_headers(id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(LOCATION, format!("/payments/{id}").parse().unwrap());
    for name in CREDENTIALS {
        headers.insert(name, HeaderValue::from_static("secret=of-the-first-caller"));
    }
    headers.insert("x-kept", HeaderValue::from_static("kept"));
    headers
}

#[idempotent(
    scope = [caller.tenant, caller.user],
    fingerprint(fields = [amount, currency]),
    // The credentials are listed on purpose: they must be dropped all the same.
    headers = ["Set-Cookie", "Authorization", "Proxy-Authorization", "WWW-Authenticate", "proxy-authenticate", "X-Kept"],
)]
async fn create_payment(
    State(app): State<App>,
    caller: Caller,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, HeaderMap, Json<Payment>) {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    if req.hold {
        app.gate.acquire().await.unwrap().forget();
    }
    let operation_id = idem::operation_id().unwrap().to_string();
    let id = format!("pay_{n}_{}", &operation_id[..8]);
    (
        StatusCode::CREATED,
        payment_headers(&id),
        Json(Payment {
            id,
            tenant: caller.tenant,
            user: caller.user,
            amount: req.amount,
            currency: req.currency,
            operation_id,
        }),
    )
}

#[derive(serde::Serialize, Snapshot)]
struct Receipt {
    #[snapshot(biz_no)]
    receipt_no: String,
    got: Value,
}

/// A body fingerprinted whole (`Json<Value>`).
#[idempotent(scope = [caller.tenant])]
async fn import(State(app): State<App>, caller: Caller, Json(got): Json<Value>) -> Json<Receipt> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let _ = caller.user;
    Json(Receipt {
        receipt_no: format!("imp_{n}"),
        got,
    })
}

/// Largest response body stored whole by the export handlers and the layer.
const SNAPSHOT_LIMIT: usize = 1024;
/// The export body: a short head, then `EXPORT_CHUNKS` chunks of 64 KiB, then a short tail.
const EXPORT_CHUNKS: usize = 64;
const CHUNK: usize = 64 * 1024;

/// A response body made of chunks that counts how many were pulled out of it.
struct Counted {
    chunks: VecDeque<Bytes>,
    pulled: Arc<AtomicUsize>,
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(this.chunks.pop_front().map(|chunk| {
            this.pulled.fetch_add(1, Ordering::SeqCst);
            Ok(Frame::data(chunk))
        }))
    }
}

/// The chunks of an export: `{"export_id":"exp_1","rows":[..]}` (`id_field` first), or
/// `{"rows":[..]}` without a business number. About 4 MiB.
fn export_chunks(id_field: Option<&str>) -> Vec<Bytes> {
    let head = match id_field {
        Some(field) => format!(r#"{{"{field}":"exp_1","rows":["#),
        None => r#"{"rows":["#.to_owned(),
    };
    let row = Bytes::from(format!("\"{}\",", "r".repeat(CHUNK - 3)));
    let mut chunks = vec![Bytes::from(head)];
    chunks.extend(std::iter::repeat_n(row, EXPORT_CHUNKS));
    chunks.push(Bytes::from_static(br#""end"]}"#));
    chunks
}

fn counted(chunks: Vec<Bytes>, pulled: Arc<AtomicUsize>) -> Body {
    Body::new(Counted {
        chunks: chunks.into(),
        pulled,
    })
}

/// An export response: a streamed JSON body, with or without a business number.
struct Export {
    id: Option<String>,
    body: Body,
}

impl IntoResponse for Export {
    fn into_response(self) -> Response {
        ([(CONTENT_TYPE, "application/json")], self.body).into_response()
    }
}

/// Hand-written: the response's business number is known before its body is read.
impl IntoSnapshot for Export {
    fn biz_no(&self) -> Option<String> {
        self.id.clone()
    }
    fn biz_no_field() -> &'static str {
        "export_id"
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct ExportRequest {
    with_id: bool,
}

#[idempotent(scope = [caller.tenant], max_snapshot_bytes = 1024)]
async fn export(State(app): State<App>, caller: Caller, Json(req): Json<ExportRequest>) -> Export {
    app.runs.fetch_add(1, Ordering::SeqCst);
    let _ = (caller.tenant, caller.user);
    let field = req.with_id.then_some("export_id");
    Export {
        id: req.with_id.then(|| "exp_1".to_owned()),
        body: counted(export_chunks(field), app.pulled.clone()),
    }
}

/// The layer's payment service: the business number is the body's `id`.
async fn layer_payment(State(app): State<App>, parts: Parts, body: String) -> Response {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    // An amount serde_json cannot hold as an f64 (`1e400`) is the layer's business, not ours.
    let req: Value = serde_json::from_str(&body).unwrap_or_default();
    if req["hold"] == true {
        app.gate.acquire().await.unwrap().forget();
    }
    // The business number carries the currency as sent (`sql_metacharacters_are_data`).
    let id = format!(
        "pay_{n}_{}_{}",
        unique("l"),
        req["currency"].as_str().unwrap_or("")
    );
    let body = json!({
        "id": id,
        "tenant": header(&parts, "x-tenant"),
        "user": header(&parts, "x-user"),
        "amount": req["amount"],
    });
    (
        StatusCode::CREATED,
        payment_headers(&id),
        [(CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The layer's export service: the business number, if any, is the body's first member `id`.
async fn layer_export(State(app): State<App>, body: String) -> Response {
    app.runs.fetch_add(1, Ordering::SeqCst);
    let req: Value = serde_json::from_str(&body).unwrap();
    let field = (req["with_id"] == true).then_some("id");
    let body = counted(export_chunks(field), app.pulled.clone());
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

// run_once: a queue consumer

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Shipped {
    shipment: String,
    tenant: String,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum ShipError {
    Idempotency(u16),
}

impl From<IdempotencyError> for ShipError {
    fn from(e: IdempotencyError) -> Self {
        ShipError::Idempotency(e.status())
    }
}

static SHIP: HandlerConfig = HandlerConfig::new("hostile::ship");

async fn ship(app: &App, scope: &[&dyn ScopePart], msg_id: &str) -> Result<Shipped, ShipError> {
    let tenant: String = scope
        .iter()
        .map(|p| idem::key::write_scope_part(*p))
        .collect::<Vec<_>>()
        .join("|");
    let runs = app.runs.clone();
    run_once(
        &app.idem,
        &SHIP,
        msg_id,
        scope,
        idem::RequestHash::of_bytes(b"sku-1"),
        async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Shipped {
                shipment: format!("shp_{n}_{}", unique("s")),
                tenant,
            })
        },
    )
    .await
}

// ---------------------------------------------------------------- helpers

/// A `POST` from `tenant` / `user` with `key` (raw header bytes, so that any byte can be sent).
fn post_as(
    path: &str,
    tenant: &str,
    user: &str,
    key: &[u8],
    body: impl Into<Body>,
) -> Request<Body> {
    Request::post(path)
        .header(CONTENT_TYPE, "application/json")
        .header("x-tenant", tenant)
        .header("x-user", user)
        .header("idempotency-key", HeaderValue::from_bytes(key).unwrap())
        .body(body.into())
        .unwrap()
}

async fn send(router: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let resp = router.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes().to_vec();
    (parts.status, parts.headers, bytes)
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// Checks a problem+json answer: its status and type; returns the document.
fn problem(answer: &(StatusCode, HeaderMap, Vec<u8>), status: StatusCode, slug: &str) -> Value {
    let (got, headers, body) = answer;
    assert_eq!(*got, status, "{}", String::from_utf8_lossy(body));
    assert_eq!(headers[CONTENT_TYPE], "application/problem+json");
    let p = json_of(body);
    assert_eq!(
        p["type"],
        format!("https://docs.rs/idem/latest/idem/problem/index.html#{slug}"),
        "{p}"
    );
    assert_eq!(p["status"], status.as_u16());
    p
}

fn replayed(headers: &HeaderMap) -> bool {
    headers
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// The scoped key of a request to `/payments`: the attribute names the operation after the route
/// template, the layer after the path, the same here; both scope by tenant and user.
fn payment_key(tenant: &str, user: &str, key: &str) -> ScopedKey {
    scoped_key("POST /payments", &[&tenant, &user], key).unwrap()
}

const PAY: &str = r#"{"amount":"100.00","currency":"EUR"}"#;

// ---------------------------------------------------------------- 7: hostile input

/// `:` and `%` inside tenant and user ids never make two callers share a key: the scope is hashed
/// length-prefixed, so `("a:b", "c")`, `("a", "b:c")`, `("a%3Ab", "c")` are three scopes.
async fn separators_in_scope_parts_never_merge_tenants(fx: &Fixture) {
    let m = unique("sep");
    let scopes = [
        (format!("{m}a:b"), "c".to_owned()),
        (format!("{m}a"), "b:c".to_owned()),
        (format!("{m}a%3Ab"), "c".to_owned()),
        (format!("{m}a%b"), "c%".to_owned()),
    ];
    for (front, router) in [
        ("attribute", App::new(fx).attribute()),
        ("layer", App::new(fx).layered()),
    ] {
        let key = unique("k");
        let mut firsts = Vec::new();
        for (tenant, user) in &scopes {
            let (status, headers, body) = send(
                &router,
                post_as("/payments", tenant, user, key.as_bytes(), PAY),
            )
            .await;
            assert_eq!(status, StatusCode::CREATED, "{front}: {tenant} {user}");
            assert!(
                !replayed(&headers),
                "{front}: {tenant}/{user} got another scope's response"
            );
            let body = json_of(&body);
            assert_eq!(
                (body["tenant"].as_str(), body["user"].as_str()),
                (Some(&**tenant), Some(&**user))
            );
            firsts.push(body);
        }
        // Each scope's retry gets its own response back, and each has a record of its own.
        for ((tenant, user), first) in scopes.iter().zip(&firsts) {
            let (_, headers, body) = send(
                &router,
                post_as("/payments", tenant, user, key.as_bytes(), PAY),
            )
            .await;
            assert!(replayed(&headers), "{front}");
            assert_eq!(json_of(&body), *first, "{front}");
            let record = fx
                .store
                .get(&payment_key(tenant, user, &key))
                .await
                .unwrap()
                .expect("a record per scope");
            assert_eq!(record.biz_no.as_deref(), first["id"].as_str());
        }
    }
    // run_once: the same message id from two scopes that differ only by where `:` falls.
    let app = App::new(fx);
    let (ab_c, a_bc) = ((format!("{m}a:b"), "c"), (format!("{m}a"), "b:c"));
    let msg = unique("m");
    let first = ship(&app, &[&ab_c.0, &ab_c.1], &msg).await.unwrap();
    let second = ship(&app, &[&a_bc.0, &a_bc.1], &msg).await.unwrap();
    assert_ne!(first.shipment, second.shipment);
    assert_eq!(ship(&app, &[&ab_c.0, &ab_c.1], &msg).await.unwrap(), first);
    assert_eq!(app.runs(), 2);
}

/// JSON nested 10,000 deep is refused before anything runs wherever it is read: the layer's
/// canonicalizer checks every member against its depth limit (64), also one the spec drops;
/// `idem::axum::Json` stops at serde_json's recursion limit (128). No stack overflow, no record.
/// (A struct body skips an unknown member without recursing, so there the nesting is harmless
/// and ignored: neither hashed nor seen by the handler.)
async fn deep_nesting_is_400_and_stores_nothing(fx: &Fixture) {
    let m = unique("deep");
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let app = App::new(fx);
    let with_junk = format!(r#"{{"amount":1,"currency":"EUR","junk":{deep}}}"#);
    let answer = send(
        &app.layered(),
        post_as("/payments", &m, "u", b"k-deep", with_junk.clone()),
    )
    .await;
    let p = problem(
        &answer,
        StatusCode::BAD_REQUEST,
        "request-not-fingerprintable",
    );
    assert_eq!(p["error"], "too_deep", "{p}");
    for body in [deep.clone(), format!(r#"{{"a":{deep}}}"#)] {
        let answer = send(
            &app.attribute(),
            post_as("/imports", &m, "u", b"k-deep", body),
        )
        .await;
        problem(&answer, StatusCode::BAD_REQUEST, "invalid-body");
    }
    assert_eq!(app.runs(), 0);
    assert_eq!(fx.records().containing(&m).await, 0);
    // The struct body: the junk is skipped, the payment is the request.
    let attribute = app.attribute();
    let (status, _, first) = send(
        &attribute,
        post_as("/payments", &m, "u", b"k-junk", with_junk),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(json_of(&first)["amount"], "1");
    let without = r#"{"amount":1,"currency":"EUR"}"#;
    let (_, headers, again) = send(
        &attribute,
        post_as("/payments", &m, "u", b"k-junk", without),
    )
    .await;
    assert!(replayed(&headers), "the junk was hashed");
    assert_eq!(again, first);
}

/// A 10 MiB body: `413` from the layer (1 MiB by default) and from `idem::axum::Json` (axum's
/// 2 MB default), each having read no more of the stream than its limit and one chunk.
async fn ten_mib_bodies_are_413_and_read_no_further_than_the_limit(fx: &Fixture) {
    let m = unique("big");
    let app = App::new(fx);
    let ten_mib = |pulled: &Arc<AtomicUsize>| {
        let mut chunks = vec![Bytes::from_static(br#"{"amount":1,"currency":""#)];
        chunks.extend(std::iter::repeat_n(Bytes::from(vec![b'x'; CHUNK]), 160));
        chunks.push(Bytes::from_static(br#""}"#));
        counted(chunks, pulled.clone())
    };
    let pulled = Arc::new(AtomicUsize::new(0));
    let answer = send(
        &app.layered(),
        post_as("/payments", &m, "u", b"k-big", ten_mib(&pulled)),
    )
    .await;
    problem(&answer, StatusCode::PAYLOAD_TOO_LARGE, "body-too-large");
    let limit = idem::http::DEFAULT_BODY_LIMIT;
    assert!(
        pulled.load(Ordering::SeqCst) <= 1 + limit / CHUNK + 1,
        "the layer read {} chunks of a body over its limit",
        pulled.load(Ordering::SeqCst)
    );
    let pulled = Arc::new(AtomicUsize::new(0));
    let answer = send(
        &app.attribute(),
        post_as("/payments", &m, "u", b"k-big", ten_mib(&pulled)),
    )
    .await;
    problem(&answer, StatusCode::PAYLOAD_TOO_LARGE, "invalid-body");
    let axum_limit = 2 * 1024 * 1024;
    assert!(
        pulled.load(Ordering::SeqCst) <= 1 + axum_limit / CHUNK + 1,
        "Json read {} chunks of a body over its limit",
        pulled.load(Ordering::SeqCst)
    );
    assert_eq!(app.runs(), 0);
    assert_eq!(fx.records().containing(&m).await, 0);
}

/// Numbers are exact decimals or refused, never rounded through a binary float: `1e400` is not
/// infinity, two 40-digit numbers an `f64` cannot tell apart are two requests (422, the record
/// untouched), and what has no exact form is `400` with nothing stored.
async fn huge_and_long_numbers_are_exact_or_refused(fx: &Fixture) {
    let m = unique("num");
    let app = App::new(fx);
    let layer = app.layered();
    let pay = |amount: &str| format!(r#"{{"amount":{amount},"currency":"EUR"}}"#);
    // The layer hashes the raw text exactly.
    let (status, _, first) = send(
        &layer,
        post_as("/payments", &m, "u", b"k-1e400", pay("1e400")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, headers, again) = send(
        &layer,
        post_as("/payments", &m, "u", b"k-1e400", pay("10e399")),
    )
    .await;
    assert!(replayed(&headers), "10e399 is 1e400");
    assert_eq!(again, first);
    let key = payment_key(&m, "u", "k-1e400");
    let before = fx.store.get(&key).await.unwrap().unwrap();
    for other in [
        "1e401",
        "1.0000000000000000000000000000000000001e400",
        "1e-400",
    ] {
        let answer = send(
            &layer,
            post_as("/payments", &m, "u", b"k-1e400", pay(other)),
        )
        .await;
        problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "key-reused");
    }
    assert_eq!(
        fx.store.get(&key).await.unwrap().unwrap(),
        before,
        "record touched"
    );
    let forty = "1234567890123456789012345678901234567890";
    let forty_one_off = "1234567890123456789012345678901234567891";
    assert_eq!(
        forty.parse::<f64>(),
        forty_one_off.parse::<f64>(),
        "the same f64"
    );
    let (status, ..) = send(
        &layer,
        post_as("/payments", &m, "u", b"k-forty", pay(forty)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let key = payment_key(&m, "u", "k-forty");
    let before = fx.store.get(&key).await.unwrap().unwrap();
    let answer = send(
        &layer,
        post_as("/payments", &m, "u", b"k-forty", pay(forty_one_off)),
    )
    .await;
    problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "key-reused");
    assert_eq!(
        fx.store.get(&key).await.unwrap().unwrap(),
        before,
        "record touched"
    );
    assert_eq!(app.runs(), 2);
    let stored = fx.records().containing(&m).await;
    // Beyond the canonical form's range: refused, nothing stored.
    let answer = send(
        &layer,
        post_as("/payments", &m, "u", b"k-range", pay("1e1101")),
    )
    .await;
    let p = problem(
        &answer,
        StatusCode::BAD_REQUEST,
        "request-not-fingerprintable",
    );
    assert_eq!(p["error"], "number_out_of_range", "{p}");
    // The attribute's `Decimal` holds 28 digits: more is a 400 (never a rounding), nothing stored.
    let attribute = app.attribute();
    for amount in ["1e400", forty] {
        let answer = send(
            &attribute,
            post_as("/payments", &m, "u", b"k-dec", pay(amount)),
        )
        .await;
        problem(&answer, StatusCode::BAD_REQUEST, "invalid-body");
    }
    // Integers past an f64's 53 bits reach `idem::deserialize::decimal` as an f64 (serde_json without
    // `arbitrary_precision`): two such amounts 1 apart would be one request. Refused instead; as
    // strings they are exact.
    let (big, big_plus_one) = ("1234567890123456789012345", "1234567890123456789012346");
    for amount in [big, big_plus_one] {
        let answer = send(
            &attribute,
            post_as("/payments", &m, "u", b"k-dec", pay(amount)),
        )
        .await;
        problem(&answer, StatusCode::BAD_REQUEST, "invalid-body");
    }
    assert_eq!(app.runs(), 2);
    assert_eq!(fx.records().containing(&m).await, stored);
    assert!(
        fx.store
            .get(&payment_key(&m, "u", "k-dec"))
            .await
            .unwrap()
            .is_none()
    );
    let quoted = |s: &str| pay(&format!("\"{s}\""));
    let (status, ..) = send(
        &attribute,
        post_as("/payments", &m, "u", b"k-str", quoted(big)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let answer = send(
        &attribute,
        post_as("/payments", &m, "u", b"k-str", quoted(big_plus_one)),
    )
    .await;
    problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "key-reused");
    assert_eq!(app.runs(), 3);
    assert!(
        fx.store
            .get(&payment_key(&m, "u", "k-range"))
            .await
            .unwrap()
            .is_none()
    );
}

/// `-0` is `0`, in the layer's canonical form and in the attribute's `Decimal`: a retry that
/// writes the amount the other way is the same request, not a conflict.
async fn negative_zero_is_zero(fx: &Fixture) {
    let m = unique("zero");
    let app = App::new(fx);
    let pay = |amount: &str| format!(r#"{{"amount":{amount},"currency":"EUR"}}"#);
    for router in [app.layered(), app.attribute()] {
        let key = unique("k");
        let (status, _, first) = send(
            &router,
            post_as("/payments", &m, "u", key.as_bytes(), pay("-0")),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
        for same in ["0", "-0.0", "0e5", "\"-0.00\""] {
            let (status, headers, again) = send(
                &router,
                post_as("/payments", &m, "u", key.as_bytes(), pay(same)),
            )
            .await;
            assert_eq!(status, StatusCode::CREATED, "{same}");
            assert!(replayed(&headers), "{same} is -0");
            assert_eq!(again, first);
        }
    }
    assert_eq!(app.runs(), 2);
}

/// A member named twice is refused where the hash and the handler could disagree about which one
/// counts: the layer (raw body: `duplicate_member`, also when an escape spells the name) and a
/// struct body (serde's `duplicate field`). A `Json<Value>` body keeps the last one (serde_json),
/// and so does its fingerprint: what is hashed is what the handler got.
async fn duplicate_member_names_are_refused(fx: &Fixture) {
    let m = unique("dup");
    let app = App::new(fx);
    for body in [
        r#"{"amount":1,"amount":2,"currency":"EUR"}"#,
        r#"{"amount":1,"am\u006funt":2,"currency":"EUR"}"#,
    ] {
        let answer = send(
            &app.layered(),
            post_as("/payments", &m, "u", b"k-dup", body),
        )
        .await;
        let p = problem(
            &answer,
            StatusCode::BAD_REQUEST,
            "request-not-fingerprintable",
        );
        assert_eq!(p["error"], "duplicate_member", "{p}");
        let answer = send(
            &app.attribute(),
            post_as("/payments", &m, "u", b"k-dup", body),
        )
        .await;
        problem(&answer, StatusCode::BAD_REQUEST, "invalid-body");
    }
    assert_eq!(app.runs(), 0);
    assert_eq!(fx.records().containing(&m).await, 0);
    // `Json<Value>`: the handler and the fingerprint both see `{"a":2}`.
    let attribute = app.attribute();
    let (status, _, first) = send(
        &attribute,
        post_as("/imports", &m, "u", b"k-dup", r#"{"a":1,"a":2}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json_of(&first)["got"], json!({"a": 2}));
    let (_, headers, _) = send(
        &attribute,
        post_as("/imports", &m, "u", b"k-dup", r#"{"a":2}"#),
    )
    .await;
    assert!(replayed(&headers));
    let answer = send(
        &attribute,
        post_as("/imports", &m, "u", b"k-dup", r#"{"a":1}"#),
    )
    .await;
    problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "key-reused");
}

/// Bodies that are not UTF-8 (a raw `0xFF`, an escaped lone surrogate) are `400` everywhere and
/// store nothing.
async fn invalid_utf8_bodies_are_400_and_store_nothing(fx: &Fixture) {
    let m = unique("utf8");
    let app = App::new(fx);
    let bodies: [&[u8]; 3] = [
        b"{\"amount\":1,\"currency\":\"EU\xffR\"}",
        b"{\"amount\":1,\"currency\":\"\xc3\"}",
        br#"{"amount":1,"currency":"\ud800"}"#,
    ];
    for body in bodies {
        let answer = send(
            &app.layered(),
            post_as("/payments", &m, "u", b"k-utf8", body.to_vec()),
        )
        .await;
        let p = problem(
            &answer,
            StatusCode::BAD_REQUEST,
            "request-not-fingerprintable",
        );
        assert_eq!(p["error"], "invalid_json", "{p}");
        let answer = send(
            &app.attribute(),
            post_as("/payments", &m, "u", b"k-utf8", body.to_vec()),
        )
        .await;
        problem(&answer, StatusCode::BAD_REQUEST, "invalid-body");
    }
    assert_eq!(app.runs(), 0);
    assert_eq!(fx.records().containing(&m).await, 0);
}

/// A response over the snapshot limit whose business number is known — given by the handler, or
/// (layer) the first member of its JSON body — is streamed to the first caller: when the engine
/// answers, it has read the limit and one chunk, not the ~4 MiB body. The record stores the
/// truncated form (`{"<biz_no_field>":"<biz_no>"}`, within the limit), which the retry gets.
async fn over_limit_response_with_business_number_is_streamed_and_truncated(fx: &Fixture) {
    let m = unique("stream");
    for (front, path, field) in [
        ("attribute", "/exports", "export_id"),
        ("layer", "/exports", "id"),
    ] {
        let app = App::new(fx);
        let router = if front == "layer" {
            app.layered()
        } else {
            app.attribute()
        };
        let key = unique("k");
        let request = || post_as(path, &m, "u", key.as_bytes(), r#"{"with_id":true}"#);
        let resp = router.clone().oneshot(request()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{front}");
        // Answered after reading the head and one 64 KiB chunk (over the 1 KiB limit).
        assert!(
            app.pulled() <= 2,
            "{front}: {} chunks read before answering",
            app.pulled()
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let whole: Vec<u8> = export_chunks(Some(field)).concat();
        assert!(
            body[..] == whole[..],
            "{front}: the first caller got another body"
        );
        assert_eq!(app.pulled(), EXPORT_CHUNKS + 2);
        let truncated = format!(r#"{{"{field}":"exp_1"}}"#);
        let (status, headers, replay) = send(&router, request()).await;
        assert_eq!(status, StatusCode::OK);
        assert!(replayed(&headers));
        assert_eq!(headers["idempotent-snapshot"], "truncated", "{front}");
        assert_eq!(String::from_utf8_lossy(&replay), truncated, "{front}");
        // The attribute scopes exports by tenant, the layer by tenant and user.
        let scope: &[&dyn ScopePart] = if front == "layer" { &[&m, &"u"] } else { &[&m] };
        let scoped = scoped_key("POST /exports", scope, &key).unwrap();
        let record = fx.store.get(&scoped).await.unwrap().expect("stored");
        assert_eq!(record.body, truncated.as_bytes(), "{front}");
        assert!(record.body.len() <= SNAPSHOT_LIMIT);
        assert_eq!(record.biz_no.as_deref(), Some("exp_1"));
        if let Some(row) = fx.records().row(&scoped).await {
            assert_eq!(row.resp_body.as_deref(), Some(truncated.as_bytes()));
        }
        assert_eq!(app.runs(), 1);
    }
}

/// Without a business number there is no truncated form that keeps it (S11, S12), and a bare
/// "ok" is never stored: the body is read whole and stored whole, and the retry gets it byte for
/// byte. (Memory is then bounded by the response itself, not by the snapshot limit:
/// `docs/http.md`, "Size".)
async fn over_limit_response_without_business_number_is_stored_whole(fx: &Fixture) {
    let m = unique("whole");
    for front in ["attribute", "layer"] {
        let app = App::new(fx);
        let router = if front == "layer" {
            app.layered()
        } else {
            app.attribute()
        };
        let key = unique("k");
        let request = || post_as("/exports", &m, "u", key.as_bytes(), r#"{"with_id":false}"#);
        let (status, _, first) = send(&router, request()).await;
        assert_eq!(status, StatusCode::OK);
        let whole: Vec<u8> = export_chunks(None).concat();
        assert!(first == whole, "{front}");
        let (_, headers, replay) = send(&router, request()).await;
        assert!(replayed(&headers), "{front}");
        assert!(headers.get("idempotent-snapshot").is_none());
        assert!(replay == whole, "{front}: the replay is not the whole body");
        assert_eq!(app.runs(), 1);
    }
}

// ---------------------------------------------------------------- 8: security

/// Tenant B sending tenant A's key — with A's payload, with another payload, while A's request
/// still runs — is answered with its own response: never A's body or `Location`, never A's
/// `409` or `422` (which would tell B that A's key exists), and A's record stays A's. Through the
/// attribute, the layer and `run_once`.
async fn another_tenants_key_never_returns_its_response(fx: &Fixture) {
    let (a, b, c) = (unique("tenant_a"), unique("tenant_b"), unique("tenant_c"));
    for front in ["attribute", "layer"] {
        let app = App::new(fx);
        let router = if front == "layer" {
            app.layered()
        } else {
            app.attribute()
        };
        let key = unique("k");
        let held = r#"{"amount":"100.00","currency":"EUR","hold":true}"#;
        // A's request runs and waits; B and C send A's key meanwhile.
        let first = tokio::spawn({
            let (router, a, key) = (router.clone(), a.clone(), key.clone());
            async move { send(&router, post_as("/payments", &a, "u", key.as_bytes(), held)).await }
        });
        for waited in 0.. {
            if app.runs() > 0 {
                break;
            }
            assert!(waited < 5_000, "{front}: A's handler did not start");
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let (status, headers, from_b) =
            send(&router, post_as("/payments", &b, "u", key.as_bytes(), PAY)).await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "{front}: B blocked by A's running request"
        );
        assert!(!replayed(&headers));
        let other = r#"{"amount":"5.00","currency":"EUR"}"#;
        let (status, ..) = send(
            &router,
            post_as("/payments", &c, "u", key.as_bytes(), other),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "{front}: C told that A's key exists"
        );
        app.gate.add_permits(1);
        let (status, headers_a, from_a) = first.await.unwrap();
        assert_eq!(status, StatusCode::CREATED);
        // Now completed: B's and A's retries get their own responses.
        let (_, headers, again_b) =
            send(&router, post_as("/payments", &b, "u", key.as_bytes(), PAY)).await;
        assert!(replayed(&headers));
        assert_eq!(again_b, from_b, "{front}");
        assert_ne!(json_of(&from_b)["id"], json_of(&from_a)["id"]);
        assert_eq!(json_of(&from_b)["tenant"], b.as_str());
        assert_ne!(headers[LOCATION], headers_a[LOCATION]);
        let (_, headers, again_a) =
            send(&router, post_as("/payments", &a, "u", key.as_bytes(), PAY)).await;
        assert!(replayed(&headers));
        assert_eq!(again_a, from_a, "{front}: A's record was touched");
        let record = fx
            .store
            .get(&payment_key(&a, "u", &key))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.biz_no.as_deref(), json_of(&from_a)["id"].as_str());
        assert_eq!(record.body, from_a);
        assert_eq!(app.runs(), 3, "{front}");
    }
    // run_once: a message id redelivered under another tenant is that tenant's own operation.
    let app = App::new(fx);
    let msg = unique("m");
    let for_a = ship(&app, &[&a], &msg).await.unwrap();
    let for_b = ship(&app, &[&b], &msg).await.unwrap();
    assert_eq!(
        (for_a.tenant.as_str(), for_b.tenant.as_str()),
        (a.as_str(), b.as_str())
    );
    assert_ne!(for_a.shipment, for_b.shipment);
    assert_eq!(ship(&app, &[&a], &msg).await.unwrap(), for_a);
    assert_eq!(ship(&app, &[&b], &msg).await.unwrap(), for_b);
    assert_eq!(app.runs(), 2);
}

/// `set-cookie`, `authorization`, `proxy-authorization`, `www-authenticate` and
/// `proxy-authenticate` reach the first caller but are neither stored nor replayed, even when
/// listed in `headers = [..]` (the attribute) or `replay_headers` (the layer), in any case; a
/// harmless listed header is.
async fn credentials_are_never_stored_nor_replayed(fx: &Fixture) {
    let m = unique("cred");
    for front in ["attribute", "layer"] {
        let app = App::new(fx);
        let router = if front == "layer" {
            app.layered()
        } else {
            app.attribute()
        };
        let key = unique("k");
        let (status, first, _) =
            send(&router, post_as("/payments", &m, "u", key.as_bytes(), PAY)).await;
        assert_eq!(status, StatusCode::CREATED);
        let (_, replay, _) =
            send(&router, post_as("/payments", &m, "u", key.as_bytes(), PAY)).await;
        assert!(replayed(&replay));
        for name in CREDENTIALS {
            assert!(
                first.contains_key(name),
                "{front}: the first caller gets {name}"
            );
            assert!(!replay.contains_key(name), "{front}: {name} replayed");
        }
        assert_eq!(replay["x-kept"], "kept", "{front}");
        assert_eq!(replay[LOCATION], first[LOCATION]);
        let record = fx
            .store
            .get(&payment_key(&m, "u", &key))
            .await
            .unwrap()
            .unwrap();
        let mut names: Vec<&str> = record.headers.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-type", "location", "x-kept"], "{front}");
        assert!(
            !record
                .headers
                .iter()
                .any(|(_, v)| v.windows(6).any(|w| w == b"secret")),
            "{front}: a credential's value stored"
        );
    }
}

/// The claim index is `key_hash`, the SHA-256 of the length-prefixed scoped key; the readable
/// `idem_key` beside it holds the scope parts, operation and client key in clear (`docs/storage.md`)
/// and is never read to decide anything: overwritten, the record is still found by its hash, and
/// another key spelled like it is not.
async fn keys_are_stored_hashed_and_the_readable_key_decides_nothing(fx: &Fixture) {
    let m = unique("hash");
    let app = App::new(fx);
    let router = app.attribute();
    let (status, _, first) = send(&router, post_as("/payments", &m, "u", b"k-hash", PAY)).await;
    assert_eq!(status, StatusCode::CREATED);
    let key = payment_key(&m, "u", "k-hash");
    let Some(row) = fx.records().row(&key).await else {
        return; // the memory store has no table
    };
    assert_eq!(row.key_hash, key.hash().to_vec());
    assert_eq!(row.key_hash.len(), 32);
    assert_eq!(row.idem_key, format!("{m}:u:POST /payments:k-hash"));
    let hash = serde_json::from_str::<CreatePayment>(PAY).unwrap();
    let hash = hash.fingerprint_fields(idem::fields!(CreatePayment: amount, currency));
    assert_eq!(row.request_hash, hash.to_string());
    // Decisions go by the hash alone.
    let impostor = payment_key(&m, "u", "k-other");
    fx.records().set_idem_key(&key, impostor.readable()).await;
    let (_, headers, again) = send(&router, post_as("/payments", &m, "u", b"k-hash", PAY)).await;
    assert!(replayed(&headers));
    assert_eq!(again, first);
    let (status, headers, _) = send(&router, post_as("/payments", &m, "u", b"k-other", PAY)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(!replayed(&headers), "found by its readable key");
    assert_eq!(app.runs(), 2);
}

/// Quotes, semicolons, comment markers, placeholders and backslashes in keys, scope parts,
/// bodies and business numbers are data: every value reaches the database as a bind parameter,
/// and comes back byte for byte.
async fn sql_metacharacters_are_data(fx: &Fixture) {
    let m = unique("sql");
    let app = App::new(fx);
    let router = app.attribute();
    let tenant = format!("{m}'); DELETE FROM idem_idempotency_records; --");
    let user = r#"$1 ? %s \' \" `x`"#;
    let keys: [&[u8]; 3] = [
        b"';DROP_TABLE_idem_idempotency_records;--",
        br#""' OR '1'='1' -- \\ \"x\"""#,
        b"$1?%_*/**/",
    ];
    for key in keys {
        let (status, _, first) = send(&router, post_as("/payments", &tenant, user, key, PAY)).await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(key)
        );
        let (_, headers, again) =
            send(&router, post_as("/payments", &tenant, user, key, PAY)).await;
        assert!(replayed(&headers));
        assert_eq!(again, first);
        let client_key = idem::key::parse_header_key(key).unwrap();
        let scoped = payment_key(&tenant, user, &client_key);
        let record = fx.store.get(&scoped).await.unwrap().expect("stored");
        assert_eq!(record.key, scoped.readable());
        assert_eq!(record.biz_no.as_deref(), json_of(&first)["id"].as_str());
        assert_eq!(record.body, first);
    }
    assert_eq!(fx.records().containing(&m).await, 3);
    // A business number and a body made of the same characters (the layer reads `id`).
    let value = r#"o'neil"; DROP TABLE x; -- \ $1 ?"#;
    let body = json!({"amount": 1, "currency": value}).to_string();
    let layer = app.layered();
    let (status, _, first) = send(
        &layer,
        post_as("/payments", &tenant, user, b"k-body", body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, headers, again) =
        send(&layer, post_as("/payments", &tenant, user, b"k-body", body)).await;
    assert!(replayed(&headers));
    assert_eq!(again, first);
    let id = json_of(&first)["id"].as_str().unwrap().to_owned();
    assert!(id.ends_with(value), "{id}");
    let record = fx
        .store
        .get(&payment_key(&tenant, user, "k-body"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.biz_no, Some(id));
}

/// A scope part is the application's (an identity, a tenant id), and may hold any character: a
/// NUL, a newline, a C1 control. The key is still claimed and replayed on every backend — the
/// readable key escapes them (`%00`, `%0A`, `%C2%85`: PostgreSQL's `TEXT` refuses U+0000, which
/// answered every request of such a caller `503`) — and they stay apart from their escapes.
async fn control_characters_in_scope_parts_are_data(fx: &Fixture) {
    let m = unique("ctl");
    let app = App::new(fx);
    let raw = format!("{m}a\0b\nc\u{85}");
    let spelled = format!("{m}a%00b%0Ac%C2%85");
    let first = ship(&app, &[&raw], "m-ctl")
        .await
        .expect("claimed and stored");
    assert_eq!(ship(&app, &[&raw], "m-ctl").await.unwrap(), first);
    let other = ship(&app, &[&spelled], "m-ctl").await.unwrap();
    assert_ne!(
        other.shipment, first.shipment,
        "a part and its escape share a key"
    );
    assert_eq!(app.runs(), 2);
    let key = scoped_key(SHIP.operation().unwrap(), &[&raw], "m-ctl").unwrap();
    assert_eq!(
        key.readable(),
        format!("{m}a%00b%0Ac%C2%85:hostile%3A%3Aship:m-ctl")
    );
    let spelled_key = scoped_key(SHIP.operation().unwrap(), &[&spelled], "m-ctl").unwrap();
    assert_eq!(
        spelled_key.readable(),
        format!("{m}a%2500b%250Ac%25C2%2585:hostile%3A%3Aship:m-ctl")
    );
    if let Some(row) = fx.records().row(&key).await {
        assert_eq!(row.idem_key, key.readable());
    }
}

/// A business number the handler echoes from its input may be one that not every store can keep:
/// U+0000 (PostgreSQL's `TEXT` refuses it), 70,000 bytes (MariaDB's `TEXT` holds 65,535) or
/// 20,000 bytes (over the 16 KiB whose sealed receipt still fits that `TEXT`). The
/// snapshot is stored without it (and so replayed exactly) on every backend, instead of a
/// completion that fails on every attempt there: the retry got `409` for the lease, then ran the
/// handler again.
async fn unstorable_business_number_is_left_out(fx: &Fixture) {
    let m = unique("nulbiz");
    let app = App::new(fx);
    let layer = IdempotencyLayer::new(
        app.idem.clone(),
        Spec::from_json_str(r#"{"ref": "any"}"#).unwrap(),
    )
    .scope(|parts| Some(vec![header(parts, "x-tenant")]));
    let runs = app.runs.clone();
    let router = Router::new()
        .route(
            "/echo",
            post(move |body: String| {
                runs.fetch_add(1, Ordering::SeqCst);
                let req: Value = serde_json::from_str(&body).unwrap();
                async move {
                    (
                        StatusCode::CREATED,
                        [(CONTENT_TYPE, "application/json")],
                        json!({"id": req["ref"]}).to_string(),
                    )
                }
            }),
        )
        .layer(layer);
    let (long, sealed_too_long) = ("r".repeat(70_000), "s".repeat(20_000));
    for (n, reference) in ["ref\u{0}1", &long, &sealed_too_long]
        .into_iter()
        .enumerate()
    {
        let key = format!("k-biz-{n}");
        let body = json!({ "ref": reference }).to_string();
        let request = || post_as("/echo", &m, "u", key.as_bytes(), body.clone());
        let (status, _, first) = send(&router, request()).await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, headers, again) = send(&router, request()).await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&again)
        );
        assert!(replayed(&headers));
        assert!(again == first, "another body replayed");
        assert_eq!(app.runs(), n + 1);
        let scoped = scoped_key("POST /echo", &[&m], &key).unwrap();
        let record = fx.store.get(&scoped).await.unwrap().unwrap();
        assert_eq!(record.biz_no, None);
    }
}

// ---------------------------------------------------------------- helpers' own checks

#[test]
fn export_bodies_are_json() {
    for field in [Some("id"), None] {
        let body: Vec<u8> = export_chunks(field).concat();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["rows"].as_array().unwrap().len(), EXPORT_CHUNKS + 1);
    }
}
