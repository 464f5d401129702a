//! `#[idempotent]` on real axum handlers, driven in-process (`tower::ServiceExt::oneshot`) against
//! the memory store and an SQLite file: a handler runs once per key, a retry is replayed with
//! `Idempotent-Replayed: true`, another payload under the same key is a 422, the operation id is
//! readable in the handler, `headers = [..]` widens the replayed headers, the scope separates
//! tenants; `latest_state` replays the current state through `lookup`, `suppress_only` a body
//! with the business number only; a path parameter and a JSON body that is not a struct
//! (`Json<Vec<Value>>`) are fingerprinted whole, without a wrapper type.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{FromRef, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use idem::{Fingerprint, Idem, Snapshot, idempotent, store::Store};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tower::ServiceExt;

#[derive(Clone)]
struct App {
    idem: Idem,
    /// How many times each handler body ran.
    runs: Arc<AtomicU32>,
    /// Order number -> status, for the `latest_state` handler.
    orders: Arc<Mutex<HashMap<String, &'static str>>>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

/// The caller's tenant, from `X-Tenant-Id` (a stand-in for real authentication).
struct Tenant(String);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = StatusCode;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        let tenant = parts
            .headers
            .get("x-tenant-id")
            .and_then(|v| v.to_str().ok())
            .ok_or(StatusCode::UNAUTHORIZED)?;
        Ok(Tenant(tenant.to_owned()))
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: Decimal,
    currency: String,
    /// Not part of the operation's identity: not in `fields`.
    note: Option<String>,
    #[fingerprint(env)]
    client_ip: Option<String>,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
    tenant: String,
    amount: Decimal,
    currency: String,
    operation_id: String,
}

#[derive(Debug)]
struct ApiError(StatusCode);

impl axum::response::IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

/// A created payment with two response headers (an alias: the response shape is checked through
/// `IntoSnapshot`, not by its spelling).
type Created = (StatusCode, [(&'static str, &'static str); 2], Json<Payment>);

#[idempotent(
    scope = [tenant.0],
    fingerprint(fields = [amount, currency]),
    ttl = "90d",
    lease = "10s",
    headers = ["X-Request-Cost"],
)]
async fn create_payment(
    State(app): State<App>,
    tenant: Tenant,
    Json(req): Json<CreatePayment>,
) -> Result<Created, ApiError> {
    if req.amount <= Decimal::ZERO {
        return Err(ApiError(StatusCode::BAD_REQUEST));
    }
    let _ = (req.note, req.client_ip);
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let operation_id = idem::operation_id()
        .ok_or(ApiError(StatusCode::INTERNAL_SERVER_ERROR))?
        .to_string();
    let payment = Payment {
        id: format!("pay_{n}"),
        tenant: tenant.0,
        amount: req.amount,
        currency: req.currency,
        operation_id,
    };
    Ok((
        StatusCode::CREATED,
        [("x-request-cost", "3"), ("x-not-replayed", "1")],
        Json(payment),
    ))
}

/// The same handler without `headers = [..]`: only the default whitelist is replayed.
#[idempotent(scope = [tenant.0], fingerprint(fields = [amount, currency]))]
async fn create_payment_default_headers(
    State(app): State<App>,
    tenant: Tenant,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, [(&'static str, &'static str); 1], Json<Payment>) {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let payment = Payment {
        id: format!("pay_{n}"),
        tenant: tenant.0,
        amount: req.amount,
        currency: req.currency,
        operation_id: String::new(),
    };
    (
        StatusCode::CREATED,
        [("x-request-cost", "3")],
        Json(payment),
    )
}

#[derive(serde::Deserialize, Fingerprint)]
struct PlaceOrder {
    sku: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Order {
    #[snapshot(biz_no)]
    order_no: String,
    status: &'static str,
}

/// Renders the current state of an order (`latest_state` replays).
async fn find_order(app: App, order_no: String) -> Result<Json<Order>, StatusCode> {
    let status = *app
        .orders
        .lock()
        .unwrap()
        .get(&order_no)
        .ok_or(StatusCode::NOT_FOUND)?;
    Ok(Json(Order { order_no, status }))
}

#[idempotent(
    scope = default,
    contract = "latest_state",
    lookup = {
        let app = app.clone();
        move |order_no| find_order(app, order_no)
    },
)]
async fn place_order(
    State(app): State<App>,
    Json(req): Json<PlaceOrder>,
) -> (StatusCode, Json<Order>) {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let order_no = format!("o-{n}-{}", req.sku);
    app.orders
        .lock()
        .unwrap()
        .insert(order_no.clone(), "placed");
    (
        StatusCode::CREATED,
        Json(Order {
            order_no,
            status: "placed",
        }),
    )
}

#[idempotent(scope = global, contract = "suppress_only", fingerprint(arg = req))]
async fn cancel_order(State(app): State<App>, Json(req): Json<PlaceOrder>) -> Json<Order> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    Json(Order {
        order_no: format!("c-{n}-{}", req.sku),
        status: "cancelled",
    })
}

#[derive(serde::Serialize, Snapshot)]
struct Receipt {
    #[snapshot(biz_no)]
    receipt_no: String,
    of: Value,
}

/// No body: the path parameter is the request (the same key on another payment is a 422).
#[idempotent(scope = [tenant.0], fingerprint(arg = payment_id))]
async fn capture_payment(
    State(app): State<App>,
    tenant: Tenant,
    Path(payment_id): Path<String>,
) -> Json<Receipt> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let _ = tenant;
    Json(Receipt {
        receipt_no: format!("cap-{n}"),
        of: Value::String(payment_id),
    })
}

/// A JSON array body, fingerprinted whole by the canonical rules.
#[idempotent(scope = [tenant.0])]
async fn import_batch(
    State(app): State<App>,
    tenant: Tenant,
    Json(batch): Json<Vec<Value>>,
) -> Json<Receipt> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let _ = tenant;
    Json(Receipt {
        receipt_no: format!("imp-{n}"),
        of: Value::Array(batch),
    })
}

#[derive(serde::Deserialize, Fingerprint)]
struct Refund {
    amount: u64,
}

/// The payment id is not in the scope: it is hashed with the body.
#[idempotent(scope = [tenant.0])]
async fn refund(
    State(app): State<App>,
    tenant: Tenant,
    Path(payment_id): Path<String>,
    Json(req): Json<Refund>,
) -> Json<Receipt> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let _ = tenant;
    Json(Receipt {
        receipt_no: format!("re-{n}"),
        of: json!({"payment": payment_id, "amount": req.amount}),
    })
}

#[derive(serde::Deserialize, Fingerprint)]
struct PayoutOptions {
    dry_run: Option<bool>,
}

/// The query is hashed with the body: a dry run and a real payout are two requests.
#[idempotent(scope = [tenant.0])]
async fn payout(
    State(app): State<App>,
    tenant: Tenant,
    Query(options): Query<PayoutOptions>,
    Json(req): Json<Refund>,
) -> Json<Receipt> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let _ = tenant;
    Json(Receipt {
        receipt_no: format!("po-{n}"),
        of: json!({"dry_run": options.dry_run.unwrap_or(false), "amount": req.amount}),
    })
}

/// A query that changes nothing the handler does, declared so: it stays out of the hash.
#[idempotent(scope = [tenant.0], fingerprint(skip = [trace]))]
async fn traced(
    State(app): State<App>,
    tenant: Tenant,
    Query(trace): Query<HashMap<String, String>>,
    Json(req): Json<Refund>,
) -> Json<Receipt> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let _ = (tenant, trace);
    Json(Receipt {
        receipt_no: format!("tr-{n}"),
        of: json!(req.amount),
    })
}

#[derive(serde::Deserialize, Fingerprint)]
struct RefundPath {
    account: String,
    payment: String,
}

/// One field of the path in the scope: the rest of it is still hashed.
#[idempotent(scope = [p.account])]
async fn account_refund(
    State(app): State<App>,
    Path(p): Path<RefundPath>,
    Json(req): Json<Refund>,
) -> Json<Receipt> {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    Json(Receipt {
        receipt_no: format!("ar-{n}"),
        of: json!({"account": p.account, "payment": p.payment, "amount": req.amount}),
    })
}

fn router(idem: Idem) -> (Router, Arc<AtomicU32>) {
    let (router, runs, _) = router_with_orders(idem);
    (router, runs)
}

#[allow(clippy::type_complexity)]
fn router_with_orders(
    idem: Idem,
) -> (
    Router,
    Arc<AtomicU32>,
    Arc<Mutex<HashMap<String, &'static str>>>,
) {
    let runs = Arc::new(AtomicU32::new(0));
    let orders = Arc::new(Mutex::new(HashMap::new()));
    let app = App {
        idem,
        runs: runs.clone(),
        orders: orders.clone(),
    };
    let router = Router::new()
        .route("/payments", post(create_payment))
        .route("/payments-default", post(create_payment_default_headers))
        .route("/orders", post(place_order))
        .route("/orders/cancel", post(cancel_order))
        .route("/payments/{payment_id}/capture", post(capture_payment))
        .route("/imports", post(import_batch))
        .route("/payments/{payment_id}/refunds", post(refund))
        .route("/payouts", post(payout))
        .route("/traced", post(traced))
        .route(
            "/accounts/{account}/payments/{payment}/refunds",
            post(account_refund),
        )
        .layer(axum::middleware::from_fn(authenticate))
        .with_state(app);
    (router, runs, orders)
}

/// The identity an authentication middleware attaches to a request.
#[derive(Clone)]
struct Caller {
    tenant: String,
}

/// A stand-in for real authentication: the caller of a request with `X-Tenant-Id` (and
/// anonymous without one).
async fn authenticate(mut req: Request<Body>, next: axum::middleware::Next) -> Response {
    let tenant = req
        .headers()
        .get("x-tenant-id")
        .and_then(|v| v.to_str().ok());
    if let Some(tenant) = tenant.map(str::to_owned) {
        req.extensions_mut().insert(Caller { tenant });
    }
    next.run(req).await
}

/// The handle every router of this suite shares: the default scope is the authenticated caller.
fn with_caller_scope(idem: Idem) -> Idem {
    idem.with_default_scope(|parts| {
        let caller = parts.extensions.get::<Caller>()?;
        Some(vec![caller.tenant.clone()])
    })
}

async fn send(
    router: &Router,
    path: &str,
    tenant: &str,
    key: &str,
    body: Value,
) -> (StatusCode, HeaderMap, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .header("x-tenant-id", tenant)
        .header("idempotency-key", key)
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, parts.headers, json)
}

fn replayed(headers: &HeaderMap) -> bool {
    headers
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// The whole behaviour against one store.
async fn suite(idem: Idem) {
    default_scope_is_required_where_asked(idem.clone()).await;
    let idem = with_caller_scope(idem);
    operation_is_the_route_not_the_function(idem.clone()).await;
    default_scope_separates_callers(idem.clone()).await;
    runs_once_and_replays(idem.clone()).await;
    another_payload_is_422(idem.clone()).await;
    scope_separates_tenants(idem.clone()).await;
    headers_widen_the_whitelist(idem.clone()).await;
    latest_state_renders_the_current_state(idem.clone()).await;
    suppress_only_answers_the_business_number(idem.clone()).await;
    whole_values_are_fingerprints(idem.clone()).await;
    path_and_query_are_part_of_the_request(idem).await;
}

/// `capture_payment` under another name, in another module: the same operation when mounted on
/// the same route.
mod renamed {
    use super::*;

    #[idempotent(scope = [tenant.0], fingerprint(arg = payment_id))]
    pub async fn capture_the_payment(
        State(app): State<App>,
        tenant: Tenant,
        Path(payment_id): Path<String>,
    ) -> Json<Receipt> {
        let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = tenant;
        Json(Receipt {
            receipt_no: format!("renamed-{n}"),
            of: Value::String(payment_id),
        })
    }
}

async fn operation_is_the_route_not_the_function(idem: Idem) {
    let (router, runs) = router(idem.clone());
    let path = "/payments/p-route/capture";
    let (status, _, first) = send(&router, path, "acme", "k-route", json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    // The next deploy renamed and moved the handler: its operation is still
    // `POST /payments/{payment_id}/capture`, so the retry is a replay, not a second capture.
    let app = App {
        idem: idem.clone(),
        runs: runs.clone(),
        orders: Arc::default(),
    };
    let redeployed = Router::new()
        .route(
            "/payments/{payment_id}/capture",
            post(renamed::capture_the_payment),
        )
        .with_state(app.clone());
    let (status, headers, again) = send(&redeployed, path, "acme", "k-route", json!(null)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers), "{again}");
    assert_eq!(again, first);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Mounted on another route, the same function is another operation.
    let moved = Router::new()
        .route(
            "/v2/payments/{payment_id}/capture",
            post(renamed::capture_the_payment),
        )
        .with_state(app);
    let (status, headers, _) = send(
        &moved,
        "/v2/payments/p-route/capture",
        "acme",
        "k-route",
        json!(null),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!replayed(&headers));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

async fn default_scope_separates_callers(idem: Idem) {
    let (router, runs) = router(idem);
    let body = || json!({"sku": "scoped-mug"});
    let (status, _, acme) = send(&router, "/orders", "acme", "k-default", body()).await;
    assert_eq!(status, StatusCode::CREATED);
    // The same key from another caller is another operation (`scope = default`).
    let (status, headers, globex) = send(&router, "/orders", "globex", "k-default", body()).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(!replayed(&headers));
    assert_ne!(acme, globex);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // A request without an identity is refused, never run under a shared key.
    let request = Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", "k-default")
        .body(Body::from(body().to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let problem: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        problem["type"],
        "https://docs.rs/idem/latest/idem/problem/index.html#unscoped"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

async fn default_scope_is_required_where_asked(idem: Idem) {
    // A handle without a default scope under a `scope = default` handler: the server's setup is
    // incomplete; the handler does not run unscoped.
    let (router, runs) = router(idem);
    let (status, _, problem) =
        send(&router, "/orders", "acme", "k-unset", json!({"sku": "x"})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        problem["type"],
        "https://docs.rs/idem/latest/idem/problem/index.html#misconfigured"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

async fn runs_once_and_replays(idem: Idem) {
    let (router, runs) = router(idem);
    let body =
        json!({"amount": "100.00", "currency": "EUR", "note": "first", "client_ip": "203.0.113.7"});
    let (status, headers, first) = send(&router, "/payments", "acme", "k-once", body).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert!(!replayed(&headers));
    assert_eq!(first["id"], "pay_1");
    // The operation id (S22) was readable inside the handler: a UUID.
    let operation_id = first["operation_id"].as_str().unwrap().to_owned();
    assert_eq!(operation_id.len(), 36, "{operation_id}");

    // A retry from another address, with another note and `100` for `100.00`: the same request.
    let retry =
        json!({"currency": "EUR", "amount": "100", "note": "retry", "client_ip": "198.51.100.1"});
    let (status, headers, again) = send(&router, "/payments", "acme", "k-once", retry).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(replayed(&headers), "{headers:?}");
    assert_eq!(again, first);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran once");

    // Another key is another operation, with its own id.
    let body = json!({"amount": "100.00", "currency": "EUR"});
    let (status, _, other) = send(&router, "/payments", "acme", "k-twice", body).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(other["id"], "pay_2");
    assert_ne!(other["operation_id"], first["operation_id"]);
}

async fn another_payload_is_422(idem: Idem) {
    let (router, runs) = router(idem);
    let body = json!({"amount": "100.00", "currency": "EUR"});
    let (status, _, _) = send(&router, "/payments", "acme", "k-reused", body).await;
    assert_eq!(status, StatusCode::CREATED);
    let other = json!({"amount": "250.00", "currency": "EUR"});
    let (status, headers, problem) = send(&router, "/payments", "acme", "k-reused", other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(!replayed(&headers));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn scope_separates_tenants(idem: Idem) {
    let (router, runs) = router(idem);
    let body = || json!({"amount": "7", "currency": "USD"});
    let (status, _, acme) = send(&router, "/payments", "acme", "k-shared", body()).await;
    assert_eq!(status, StatusCode::CREATED);
    // The same client key from another tenant is another operation.
    let (status, headers, globex) = send(&router, "/payments", "globex", "k-shared", body()).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(!replayed(&headers));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        (acme["tenant"].as_str(), globex["tenant"].as_str()),
        (Some("acme"), Some("globex"))
    );
    assert_ne!(acme["id"], globex["id"]);
    // Each tenant's retry gets its own response back.
    let (_, headers, again) = send(&router, "/payments", "globex", "k-shared", body()).await;
    assert!(replayed(&headers));
    assert_eq!(again, globex);
    // Another payload under the other tenant's key is not a conflict with the first tenant.
    let (status, _, _) = send(
        &router,
        "/payments",
        "initech",
        "k-shared",
        json!({"amount": "1", "currency": "USD"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
}

async fn headers_widen_the_whitelist(idem: Idem) {
    let (router, _) = router(idem);
    let body = || json!({"amount": "5", "currency": "EUR"});
    let (_, first, _) = send(&router, "/payments", "acme", "k-headers", body()).await;
    assert_eq!(first["x-request-cost"], "3");
    let (_, replay, _) = send(&router, "/payments", "acme", "k-headers", body()).await;
    assert!(replayed(&replay));
    assert_eq!(
        replay["x-request-cost"], "3",
        "listed in `headers`: replayed"
    );
    assert_eq!(replay["content-type"], "application/json");
    assert!(
        replay.get("x-not-replayed").is_none(),
        "not listed: dropped"
    );

    let (_, first, _) = send(&router, "/payments-default", "acme", "k-headers", body()).await;
    assert_eq!(first["x-request-cost"], "3");
    let (_, replay, _) = send(&router, "/payments-default", "acme", "k-headers", body()).await;
    assert!(replayed(&replay));
    assert!(
        replay.get("x-request-cost").is_none(),
        "default whitelist only"
    );
}

async fn latest_state_renders_the_current_state(idem: Idem) {
    let (router, runs, orders) = router_with_orders(idem);
    let body = || json!({"sku": "mug"});
    let (status, _, first) = send(&router, "/orders", "acme", "k-order", body()).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(first, json!({"order_no": "o-1-mug", "status": "placed"}));
    orders.lock().unwrap().insert("o-1-mug".into(), "shipped");
    // The retry gets the order as it is now, rendered by `lookup`, as `200`.
    let (status, headers, again) = send(&router, "/orders", "acme", "k-order", body()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers));
    assert_eq!(again, json!({"order_no": "o-1-mug", "status": "shipped"}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn suppress_only_answers_the_business_number(idem: Idem) {
    let (router, runs) = router(idem);
    let body = || json!({"sku": "lamp"});
    let (status, _, first) = send(&router, "/orders/cancel", "acme", "k-cancel", body()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        first,
        json!({"order_no": "c-1-lamp", "status": "cancelled"})
    );
    // The duplicate is blocked; the minimal answer still carries the business number (S11).
    let (status, headers, again) =
        send(&router, "/orders/cancel", "acme", "k-cancel", body()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers));
    assert_eq!(again, json!({"order_no": "c-1-lamp"}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn whole_values_are_fingerprints(idem: Idem) {
    let (router, runs) = router(idem);
    let capture = |id: &str| format!("/payments/{id}/capture");
    let (status, headers, first) =
        send(&router, &capture("p1"), "acme", "k-cap", json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert!(!replayed(&headers));
    let (status, headers, again) =
        send(&router, &capture("p1"), "acme", "k-cap", json!(null)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers));
    assert_eq!(again, first);
    // The same key for another payment is another request, not a replay of the first capture.
    let (status, _, problem) = send(&router, &capture("p2"), "acme", "k-cap", json!(null)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let batch = json!([{"sku": "a", "qty": 1.50}, {"qty": 2, "sku": "b"}]);
    let (status, _, first) = send(&router, "/imports", "acme", "k-imp", batch).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    // The same array written otherwise (member order, `2.0` for `2`) is the same request.
    let same = json!([{"qty": 1.5, "sku": "a"}, {"sku": "b", "qty": 2.0}]);
    let (status, headers, again) = send(&router, "/imports", "acme", "k-imp", same).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replayed(&headers));
    assert_eq!(again, first);
    let reordered = json!([{"sku": "b", "qty": 2}, {"sku": "a", "qty": 1.5}]);
    let (status, _, _) = send(&router, "/imports", "acme", "k-imp", reordered).await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "an array keeps its order"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A path parameter and a query string are part of the request: the same key and body to
/// another payment, or without `?dry_run=true`, is another request (`422`), never the first
/// one's answer; a query declared with `fingerprint(skip = [..])` is not.
async fn path_and_query_are_part_of_the_request(idem: Idem) {
    let (router, runs) = router(idem);
    let body = json!({"amount": 5});
    let (status, _, first) =
        send(&router, "/payments/A/refunds", "acme", "k-re", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["of"]["payment"], "A");
    let (status, headers, again) =
        send(&router, "/payments/A/refunds", "acme", "k-re", body.clone()).await;
    assert!(replayed(&headers) && status == StatusCode::OK);
    assert_eq!(again, first);
    let (status, _, problem) =
        send(&router, "/payments/B/refunds", "acme", "k-re", body.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let (status, _, dry) = send(
        &router,
        "/payouts?dry_run=true",
        "acme",
        "k-po",
        body.clone(),
    )
    .await;
    assert_eq!(
        (status, &dry["of"]["dry_run"]),
        (StatusCode::OK, &json!(true))
    );
    let (status, _, problem) = send(&router, "/payouts", "acme", "k-po", body.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    // The same query written otherwise is the same request.
    let (status, headers, _) = send(
        &router,
        "/payouts?dry_run=true&",
        "acme",
        "k-po",
        body.clone(),
    )
    .await;
    assert!(replayed(&headers) && status == StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // The account is in the scope, the payment is hashed: another payment is a 422.
    let refund = |p: &str| format!("/accounts/acc/payments/{p}/refunds");
    let (status, _, _) = send(&router, &refund("A"), "acme", "k-ar", body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&router, &refund("B"), "acme", "k-ar", body.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(runs.load(Ordering::SeqCst), 3);

    let (status, _, first) = send(&router, "/traced?t=1", "acme", "k-tr", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, headers, again) = send(&router, "/traced?t=2", "acme", "k-tr", body).await;
    assert!(replayed(&headers) && status == StatusCode::OK);
    assert_eq!(again, first);
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store() {
    suite(Idem::new(idem::MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = idem::SqliteStore::open(dir.path().join("idem.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    suite(Idem::new(store)).await;
}

/// The same behaviour through a handle with a replay cache: replays of records it stored come
/// from the cache, and a `latest_state` replay still renders the current state through `lookup`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_with_a_replay_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = idem::SqliteStore::open(dir.path().join("idem.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let cache = idem::ReplayCache::new(1000);
    suite(Idem::new(store).with_replay_cache(cache.clone())).await;
    assert!(!cache.is_empty());
}

#[derive(Snapshot, serde::Serialize)]
struct Thing {
    #[snapshot(biz_no)]
    id: String,
}

#[idempotent(scope = global)]
async fn create_thing(
    idem::axum::Json(req): idem::axum::Json<CreatePayment>,
) -> (StatusCode, Json<Thing>) {
    let id = format!("thing-{}", req.amount);
    (StatusCode::CREATED, Json(Thing { id }))
}

/// A service that documents its errors itself sets its problem base once on the handle: every
/// problem document of its idempotent routes uses it, `idem::axum::Json`'s rejections included.
#[tokio::test]
async fn the_handles_problem_base_types_every_problem() {
    const BASE: &str = "https://api.example.com/problems/";
    let idem = Idem::new(idem::MemoryStore::new()).with_problem_base(BASE);
    let router = Router::new()
        .route("/things", post(create_thing))
        .with_state(idem);
    let body = json!({"amount": "5.00", "currency": "EUR", "note": "n", "client_ip": "x"});
    let (status, _, _) = send(&router, "/things", "acme", "k-base", body).await;
    assert_eq!(status, StatusCode::CREATED);
    // Another payload under the key: 422 under the service's base.
    let other = json!({"amount": "6.00", "currency": "EUR", "note": "n", "client_ip": "x"});
    let (status, _, problem) = send(&router, "/things", "acme", "k-base", other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["type"], format!("{BASE}key-reused"));
    // A body that does not deserialize: `Json`'s rejection, after the handle's extractor.
    let (status, _, problem) =
        send(&router, "/things", "acme", "k-bad", json!({"amount": []})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["type"], format!("{BASE}invalid-body"));
    // No key at all.
    let request = Request::post("/things")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"amount":"5","currency":"EUR"}"#))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let problem: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(problem["type"], format!("{BASE}missing-key"));
}
