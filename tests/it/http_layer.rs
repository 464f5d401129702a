//! The tower `IdempotencyLayer` in front of plain (not annotated) axum handlers, over real
//! stores (memory and SQLite).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem::IdempotencyLayer;
use idem::MemoryStore;
use idem::SqliteStore;
use idem::json::Spec;
use idem::key::scoped_key;
use idem::store::{Store, Timestamp};
use idem::{Contract, Fingerprint, HandlerConfig, Idem};
use tower::ServiceExt;

#[derive(Fingerprint, serde::Deserialize)]
struct CreatePayment {
    amount: rust_decimal::Decimal,
    currency: String,
    description: Option<String>,
    #[fingerprint(env)]
    client_ip: String,
}

use crate::records;
use records::Records;

struct Harness {
    store: Arc<dyn Store>,
    /// The same store, read around the layer.
    records: Records,
    hits: Arc<AtomicUsize>,
    _dir: Option<tempfile::TempDir>,
}

async fn memory() -> Harness {
    memory_on(Arc::new(idem::store::SystemClock))
}

/// [`memory`] reading `clock`.
fn memory_on(clock: Arc<dyn idem::store::Clock>) -> Harness {
    let store = Arc::new(MemoryStore::with_clock(clock));
    Harness {
        records: Records::Memory(store.clone()),
        store,
        hits: Arc::default(),
        _dir: None,
    }
}

async fn sqlite() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    Harness {
        records: Records::Sqlite(store.pool().clone()),
        store: Arc::new(store),
        hits: Arc::default(),
        _dir: Some(dir),
    }
}

impl Harness {
    fn app(&self, configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer) -> Router {
        let hits = self.hits.clone();
        let handler = move |body: String| {
            let hits = hits.clone();
            async move {
                let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
                if body.contains("slow") {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                (
                    StatusCode::CREATED,
                    [(CONTENT_TYPE, "application/json")],
                    format!(r#"{{"id":"pay_{n}","echo":{}}}"#, body.len()),
                )
            }
        };
        let layer = IdempotencyLayer::for_type::<CreatePayment>(Idem::from_arc(self.store.clone()))
            .global();
        Router::new()
            .route(
                "/payments",
                post(handler.clone()).get(|| async { "listing" }),
            )
            .layer(configure(layer))
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn req(key: Option<&str>, body: &str) -> Request<Body> {
    let mut r = Request::post("/payments").header(CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        r = r.header("idempotency-key", key);
    }
    r.body(Body::from(body.to_owned())).unwrap()
}

async fn send(app: &Router, r: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let resp = app.clone().oneshot(r).await.unwrap();
    let (parts, body) = resp.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes().to_vec(),
    )
}

fn problem_type(headers: &axum::http::HeaderMap, body: &[u8]) -> String {
    assert_eq!(headers[CONTENT_TYPE], "application/problem+json");
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    v["type"]
        .as_str()
        .unwrap()
        .rsplit(['/', '#'])
        .next()
        .unwrap()
        .to_owned()
}

const BODY: &str =
    r#"{"amount":"100.00","currency":"EUR","description":null,"client_ip":"1.2.3.4"}"#;

async fn same_bytes_as_the_derive(h: Harness) {
    let app = h.app(|l| l);
    let (s1, _, b1) = send(&app, req(Some("k-derive"), BODY)).await;
    assert_eq!(s1, StatusCode::CREATED);
    // The stored request hash is the derive's fingerprint of the deserialized body.
    let typed: CreatePayment = serde_json::from_str(BODY).unwrap();
    assert_eq!(typed.client_ip, "1.2.3.4"); // an environment field: not hashed
    let key = scoped_key("POST /payments", &[], "k-derive").unwrap();
    let record = h.store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.request_hash, typed.fingerprint());
    assert_eq!(record.biz_no.as_deref(), Some("pay_1"));
    // Written differently, same request: replayed byte for byte.
    let same = r#"{"client_ip":"9.9.9.9","currency":"EUR","amount":100}"#;
    let (s2, h2, b2) = send(&app, req(Some("\"k-derive\""), same)).await;
    assert_eq!(s2, StatusCode::CREATED);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(b2, b1);
    // Another amount: 422.
    let other = r#"{"amount":"100.01","currency":"EUR","client_ip":"1.2.3.4"}"#;
    let (s3, h3, b3) = send(&app, req(Some("k-derive"), other)).await;
    assert_eq!(s3, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem_type(&h3, &b3), "key-reused");
    assert_eq!(h.hits(), 1);
}

#[tokio::test]
async fn memory_same_bytes_as_the_derive() {
    same_bytes_as_the_derive(memory().await).await;
}

#[tokio::test]
async fn sqlite_same_bytes_as_the_derive() {
    same_bytes_as_the_derive(sqlite().await).await;
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let h = memory().await;
    let app = h.app(|l| l.body_limit(64));
    let big = format!(
        r#"{{"amount":1,"currency":"EUR","description":"{}","client_ip":"x"}}"#,
        "d".repeat(100)
    );
    let (status, headers, body) = send(&app, req(Some("k-413"), &big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(problem_type(&headers, &body), "body-too-large");
    assert_eq!(h.hits(), 0);
    assert_eq!(h.records.containing("k-413").await, 0);
}

#[tokio::test]
async fn unfingerprintable_bodies_are_400_naming_the_path() {
    let h = memory().await;
    let app = h.app(|l| l);
    for (body, kind, path) in [
        ("not json", "invalid_json", Some("$")),
        (
            r#"{"amount":"1O0","currency":"EUR"}"#,
            "invalid_number",
            Some("$.amount"),
        ),
        ("[1,2]", "unexpected_type", Some("$")),
        (r#"{"amount":1,"amount":2}"#, "duplicate_member", Some("$")),
    ] {
        let (status, headers, bytes) = send(&app, req(Some("k-400"), body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(
            problem_type(&headers, &bytes),
            "request-not-fingerprintable"
        );
        let p: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(p["error"], kind, "{p}");
        if let Some(path) = path {
            assert_eq!(p["path"], path, "{p}");
        }
    }
    assert_eq!(h.hits(), 0);
    assert_eq!(h.records.containing("k-400").await, 0);
}

async fn missing_and_invalid_keys_are_400(h: Harness) {
    let app = h.app(|l| l);
    let (status, headers, body) = send(&app, req(None, BODY)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem_type(&headers, &body), "missing-key");
    let long = "k".repeat(256);
    let keys: [&[u8]; 8] = [
        b"\"open",
        b"",
        b"\"\"",
        long.as_bytes(),
        b"ab\tcd",
        b"k\xff",
        b"\"k\xc3\xa9\"",
        b"k1, k2",
    ];
    for key in keys {
        let mut r = req(None, BODY);
        r.headers_mut().insert(
            "idempotency-key",
            axum::http::HeaderValue::from_bytes(key).unwrap(),
        );
        let (status, headers, body) = send(&app, r).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key:?}");
        assert_eq!(problem_type(&headers, &body), "invalid-key");
    }
    // The header twice, even with one value.
    let mut r = req(Some("k-twice"), BODY);
    r.headers_mut()
        .append("idempotency-key", "k-twice".parse().unwrap());
    let (status, headers, body) = send(&app, r).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem_type(&headers, &body), "invalid-key");
    assert_eq!(h.hits(), 0);
    // Nothing stored (the layer's operation is `POST /payments`: every record's key holds it).
    assert_eq!(h.records.containing("POST /payments").await, 0);
}

#[tokio::test]
async fn memory_missing_and_invalid_keys_are_400() {
    missing_and_invalid_keys_are_400(memory().await).await;
}

#[tokio::test]
async fn sqlite_missing_and_invalid_keys_are_400() {
    missing_and_invalid_keys_are_400(sqlite().await).await;
}

#[tokio::test]
async fn safe_methods_pass_through() {
    let h = memory().await;
    let app = h.app(|l| l);
    let resp = app
        .oneshot(Request::get("/payments").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("idempotent-replayed").is_none());
}

#[tokio::test]
async fn concurrent_duplicate_is_409() {
    let h = memory().await;
    let app = h.app(|l| l);
    let slow = r#"{"amount":1,"currency":"EUR","description":"slow","client_ip":"x"}"#;
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, req(Some("k-409"), slow)).await }
    });
    while h.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, headers, body) = send(&app, req(Some("k-409"), slow)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem_type(&headers, &body), "in-progress");
    assert!(
        headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert_eq!(first.await.unwrap().0, StatusCode::CREATED);
    assert_eq!(h.hits(), 1);
}

/// With `HandlerConfig::wait`, the duplicate waits for the first request and gets its answer.
#[tokio::test]
async fn a_duplicate_with_a_wait_gets_the_first_answer() {
    let h = memory().await;
    let app = h.app(|l| l.config(HandlerConfig::for_route().wait(Duration::from_secs(10))));
    let slow = r#"{"amount":1,"currency":"EUR","description":"slow","client_ip":"x"}"#;
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, req(Some("k-wait"), slow)).await }
    });
    while h.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, headers, body) = send(&app, req(Some("k-wait"), slow)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers["idempotent-replayed"], "true");
    let (first_status, _, first_body) = first.await.unwrap();
    assert_eq!((first_status, first_body), (StatusCode::CREATED, body));
    assert_eq!(h.hits(), 1);
}

/// With `HandlerConfig::remember`, a retry past the TTL is `410 key-expired` with the business
/// number and does not reach the handler; another payload is `422`; past the window, a new
/// operation.
#[tokio::test]
async fn a_retry_past_the_ttl_of_a_remembered_key_is_410() {
    let clock = Arc::new(idem::store::ManualClock::starting_now());
    let h = memory_on(clock.clone());
    let hour = Duration::from_secs(3600);
    let app = h.app(|l| {
        l.config(
            HandlerConfig::for_route()
                .ttl(hour)
                .remember(hour.saturating_mul(10)),
        )
    });
    let (s1, ..) = send(&app, req(Some("k-remember"), BODY)).await;
    assert_eq!(s1, StatusCode::CREATED);
    clock.advance(hour + Duration::from_secs(1));
    let (s2, h2, b2) = send(&app, req(Some("k-remember"), BODY)).await;
    assert_eq!(s2, StatusCode::GONE);
    assert_eq!(h2[CONTENT_TYPE], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_slice(&b2).unwrap();
    assert_eq!(problem["biz_no"], "pay_1", "{problem}");
    assert_eq!(problem["response_status"], 201);
    let other = BODY.replace("EUR", "USD");
    let (s3, ..) = send(&app, req(Some("k-remember"), &other)).await;
    assert_eq!(s3, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(h.hits(), 1, "the handler ran past the TTL");
    clock.advance(hour.saturating_mul(10));
    let (s4, ..) = send(&app, req(Some("k-remember"), &other)).await;
    assert_eq!(s4, StatusCode::CREATED);
    assert_eq!(h.hits(), 2);
}

#[tokio::test]
async fn suppress_only_reads_the_business_number_from_the_body() {
    let h = memory().await;
    let app = h.app(|l| l.config(HandlerConfig::for_route().contract(Contract::SuppressOnly)));
    let (s1, ..) = send(&app, req(Some("k-sup"), BODY)).await;
    assert_eq!(s1, StatusCode::CREATED);
    let (s2, h2, b2) = send(&app, req(Some("k-sup"), BODY)).await;
    assert_eq!(s2, StatusCode::OK);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(b2, br#"{"id":"pay_1"}"#);
}

#[tokio::test]
async fn oversized_response_is_stored_as_its_business_number() {
    let h = memory().await;
    let app = h.app(|l| l.config(HandlerConfig::for_route().max_snapshot_bytes(16)));
    let (s1, _, b1) = send(&app, req(Some("k-big"), BODY)).await;
    assert_eq!(s1, StatusCode::CREATED);
    assert!(b1.len() > 16);
    let (s2, h2, b2) = send(&app, req(Some("k-big"), BODY)).await;
    assert_eq!(s2, StatusCode::CREATED);
    assert_eq!(h2["idempotent-snapshot"], "truncated");
    assert_eq!(b2, br#"{"id":"pay_1"}"#);
}

#[tokio::test]
async fn scope_separates_tenants() {
    let h = memory().await;
    let app = h.app(|l| {
        l.scope(|parts| {
            let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
            Some(vec![tenant.to_owned()])
        })
    });
    let with = |tenant: &str| {
        let mut r = req(Some("k-scope"), BODY);
        r.headers_mut().insert("x-tenant", tenant.parse().unwrap());
        r
    };
    send(&app, with("acme")).await;
    let (_, h2, _) = send(&app, with("globex")).await;
    assert!(h2.get("idempotent-replayed").is_none());
    let (_, h3, _) = send(&app, with("acme")).await;
    assert_eq!(h3["idempotent-replayed"], "true");
    assert_eq!(h.hits(), 2);
    // No tenant: refused, never filed under a scope every such caller would share.
    let (status, _, body) = send(&app, req(Some("k-scope"), BODY)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        String::from_utf8_lossy(&body).contains("unscoped"),
        "{body:?}"
    );
    assert_eq!(h.hits(), 2);
}

/// A service that starts its work in `call` (a `service_fn`'s closure runs there, before its
/// future is polled) is called only when the claim says run: a replay and a `409` call nothing.
#[tokio::test]
async fn the_wrapped_service_is_called_only_to_run() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (gate_tx, gate) = tokio::sync::watch::channel(false);
    let inner = tower::service_fn({
        let calls = calls.clone();
        move |_: Request<Body>| {
            calls.fetch_add(1, Ordering::SeqCst);
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok::<_, std::convert::Infallible>(
                    axum::http::Response::builder()
                        .status(201)
                        .header(CONTENT_TYPE, "application/json")
                        .body(Body::from(r#"{"id":"pay_1"}"#))
                        .unwrap(),
                )
            }
        }
    });
    let spec = Spec::from_json_str(r#"{"amount":"decimal","currency":"any"}"#).unwrap();
    let layer = IdempotencyLayer::new(Idem::new(MemoryStore::new()), spec)
        .config(HandlerConfig::new("pay"))
        .global();
    let service = tower::ServiceBuilder::new().layer(layer).service(inner);
    let first = tokio::spawn(service.clone().oneshot(req(Some("k-lazy"), BODY)));
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let busy = service
        .clone()
        .oneshot(req(Some("k-lazy"), BODY))
        .await
        .unwrap();
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "called for a 409");
    gate_tx.send(true).unwrap();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
    let replay = service.oneshot(req(Some("k-lazy"), BODY)).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "called for a replay");
}

#[tokio::test]
async fn explicit_spec_from_json() {
    let h = memory().await;
    let spec = Spec::from_json_str(r#"{"amount":"decimal","currency":"any"}"#).unwrap();
    let layer = IdempotencyLayer::new(Idem::from_arc(h.store.clone()), spec)
        .config(HandlerConfig::new("pay"))
        .global();
    let hits = h.hits.clone();
    let app = Router::new()
        .route(
            "/payments",
            post(move || {
                let hits = hits.clone();
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    StatusCode::NO_CONTENT
                }
            }),
        )
        .layer(layer);
    let (s1, ..) = send(
        &app,
        req(Some("k-spec"), r#"{"amount":1.50,"currency":"EUR","x":1}"#),
    )
    .await;
    let (s2, h2, _) = send(
        &app,
        req(Some("k-spec"), r#"{"amount":"1.5","currency":"EUR","x":2}"#),
    )
    .await;
    assert_eq!((s1, s2), (StatusCode::NO_CONTENT, StatusCode::NO_CONTENT));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(h.hits(), 1);
    // The operation named by the configuration, not the request's `POST /payments`.
    let named = scoped_key("pay", &[], "k-spec").unwrap();
    assert!(h.store.get(&named).await.unwrap().is_some());
    let by_path = scoped_key("POST /payments", &[], "k-spec").unwrap();
    assert!(h.store.get(&by_path).await.unwrap().is_none());
}

#[tokio::test]
async fn the_handler_config_sets_the_durations() {
    let h = memory().await;
    let app = h.app(|l| {
        l.config(
            HandlerConfig::for_route()
                .ttl(Duration::from_secs(3_600))
                .lease(Duration::from_millis(100))
                .timeout(Duration::from_millis(200)),
        )
    });
    let slow = r#"{"amount":1,"currency":"EUR","description":"slow","client_ip":"x"}"#;
    let (status, headers, body) = send(&app, req(Some("k-durations"), slow)).await;
    // The handler sleeps 500 ms: stopped at the timeout, its record kept for a retry.
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(problem_type(&headers, &body), "timed-out");
    let key = scoped_key("POST /payments", &[], "k-durations").unwrap();
    let record = h.store.get(&key).await.unwrap().unwrap();
    let now = Timestamp::from_system_time(std::time::SystemTime::now());
    let left = record.expire_at.saturating_duration_since(now);
    assert!(
        left > Duration::from_secs(3_500) && left <= Duration::from_secs(3_600),
        "{left:?}"
    );
}

#[test]
fn a_layer_without_a_scope_does_not_build() {
    let layer = IdempotencyLayer::new(Idem::new(MemoryStore::new()), Spec::new());
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        Router::<()>::new()
            .route("/payments", post(|| async { StatusCode::CREATED }))
            .layer(layer)
    }));
    let panic = built.expect_err("a layer without a scope must not build");
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(
        message.contains("IdempotencyLayer without a scope")
            && message.contains(".scope(")
            && message.contains(".global()"),
        "{message}"
    );
}

#[tokio::test]
async fn the_handles_default_scope_applies() {
    let h = memory().await;
    // Set by a gateway that authenticated the caller; a client cannot send it through.
    let idem = Idem::from_arc(h.store.clone()).with_default_scope(|parts| {
        let tenant = parts.headers.get("x-gateway-tenant")?.to_str().ok()?;
        Some(vec![tenant.to_owned()])
    });
    let hits = h.hits.clone();
    let app = Router::new()
        .route(
            "/payments",
            post(move || {
                let hits = hits.clone();
                async move {
                    let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
                    (StatusCode::CREATED, format!(r#"{{"id":"pay_{n}"}}"#))
                }
            }),
        )
        .layer(IdempotencyLayer::for_type::<CreatePayment>(idem));
    let from = |tenant: Option<&str>| {
        let mut r = req(Some("k-default-scope"), BODY);
        if let Some(tenant) = tenant {
            r.headers_mut()
                .insert("x-gateway-tenant", tenant.parse().unwrap());
        }
        r
    };
    let (s1, _, b1) = send(&app, from(Some("acme"))).await;
    let (s2, h2, b2) = send(&app, from(Some("globex"))).await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::CREATED));
    assert!(h2.get("idempotent-replayed").is_none());
    assert_ne!(b1, b2);
    let (status, headers, body) = send(&app, from(None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(problem_type(&headers, &body), "unscoped");
    assert_eq!(h.hits(), 2);
}

#[tokio::test]
async fn the_handles_problem_base_types_the_layers_problems() {
    const BASE: &str = "https://api.example.com/problems/";
    let idem = Idem::new(MemoryStore::new()).with_problem_base(BASE);
    let app = Router::new()
        .route("/payments", post(|| async { StatusCode::CREATED }))
        .layer(IdempotencyLayer::for_type::<CreatePayment>(idem).global());
    let problem_type = |bytes: Vec<u8>| {
        let problem: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        problem["type"].as_str().unwrap().to_owned()
    };
    let (status, _, body) = send(&app, req(None, r#"{"amount":"1","currency":"EUR"}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem_type(body), format!("{BASE}missing-key"));
    let (status, _, body) = send(&app, req(Some("k"), "not json")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        problem_type(body),
        format!("{BASE}request-not-fingerprintable")
    );
    let (status, _, _) = send(&app, req(Some("k"), r#"{"amount":"1","currency":"EUR"}"#)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, body) = send(&app, req(Some("k"), r#"{"amount":"2","currency":"EUR"}"#)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem_type(body), format!("{BASE}key-reused"));
}

// ---------------------------------------------------------------- what counts as the request

/// A handler echoing the path and query it saw, under the layer inside
/// `Router::nest("/accounts/{acct}", ..)`: `POST /transfers` (JSON body) and `DELETE
/// /transfers/{id}` (no body).
fn nested(
    hits: Arc<AtomicUsize>,
    configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer,
) -> Router {
    let echo = move |uri: axum::extract::OriginalUri| {
        let hits = hits.clone();
        async move {
            let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
            (
                StatusCode::CREATED,
                [(CONTENT_TYPE, "application/json")],
                format!(r#"{{"id":"tr_{n}","uri":"{}"}}"#, uri.0),
            )
        }
    };
    let layer = IdempotencyLayer::new(Idem::new(MemoryStore::new()), Spec::new()).global();
    let inner = Router::new()
        .route("/transfers", post(echo.clone()))
        .route("/transfers/{id}", axum::routing::delete(echo))
        .layer(configure(layer));
    Router::new().nest("/accounts/{acct}", inner)
}

fn to(method: &str, uri: &str, key: &str, body: Option<&str>) -> Request<Body> {
    let r = Request::builder()
        .method(method)
        .uri(uri)
        .header("idempotency-key", key);
    match body {
        Some(body) => r
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned())),
        None => r.body(Body::empty()),
    }
    .unwrap()
}

/// Inside `nest`, the whole path is part of the request: account B is not answered with account
/// A's transfer. A query is part of the request, unless the layer ignores it. A request without a
/// body is fingerprinted by its path and query. Two spellings of one path are one request.
#[tokio::test]
async fn path_and_query_select_the_request() {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = nested(hits.clone(), |l| l);
    let body = Some(r#"{"amount":5}"#);
    let (status, headers, first) =
        send(&app, to("POST", "/accounts/A/transfers", "k1", body)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(headers.get("idempotent-replayed").is_none());
    // The same key on account B: another request (422), never account A's transfer.
    let (status, headers, other) =
        send(&app, to("POST", "/accounts/B/transfers", "k1", body)).await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        String::from_utf8_lossy(&other)
    );
    assert!(
        headers.get("idempotent-replayed").is_none(),
        "account B got A's transfer"
    );
    let (status, _, other) = send(&app, to("POST", "/accounts/B/transfers", "k1b", body)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(String::from_utf8_lossy(&other).contains("/accounts/B/"));
    // `%41` is `A`: the same operation, replayed.
    let (status, headers, again) =
        send(&app, to("POST", "/accounts/%41/transfers", "k1", body)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(again, first);
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // The query: a dry run and the real one are two requests; the same pairs in another order
    // are one.
    let dry = "/accounts/A/transfers?dry_run=true&note=a+b";
    let (status, _, _) = send(&app, to("POST", dry, "k2", body)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, headers, _) = send(&app, to("POST", "/accounts/A/transfers", "k2", body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{headers:?}");
    let reordered = "/accounts/A/transfers?note=a%20b&dry_run=true";
    let (status, headers, _) = send(&app, to("POST", reordered, "k2", body)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    // No body: fingerprinted by path and query, not refused.
    let (status, _, _) = send(&app, to("DELETE", "/accounts/A/transfers/t1", "k3", None)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, headers, _) =
        send(&app, to("DELETE", "/accounts/A/transfers/t1", "k3", None)).await;
    assert_eq!(
        headers.get("idempotent-replayed").unwrap(),
        "true",
        "{status}"
    );
    let (status, _, _) = send(
        &app,
        to("DELETE", "/accounts/A/transfers/t1?force=true", "k3", None),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(hits.load(Ordering::SeqCst), 4);

    // `ignore_query`: the query changes nothing.
    let hits = Arc::new(AtomicUsize::new(0));
    let app = nested(hits.clone(), IdempotencyLayer::ignore_query);
    let (status, _, _) = send(&app, to("POST", "/accounts/A/transfers?utm=1", "k4", body)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, headers, _) = send(&app, to("POST", "/accounts/A/transfers?utm=2", "k4", body)).await;
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// With a fixed operation name, the path is hashed: one key on two accounts is a `422`.
#[tokio::test]
async fn a_named_operation_hashes_the_path() {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = nested(hits.clone(), |l| {
        l.config(HandlerConfig::new("transfers.create"))
    });
    let body = Some(r#"{"amount":5}"#);
    let (status, _, _) = send(&app, to("POST", "/accounts/A/transfers", "k1", body)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, _) = send(&app, to("POST", "/accounts/B/transfers", "k1", body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- replays as first answered

/// A router answering `/enc` with compressed bytes (`content-encoding: gzip`, as a compression
/// layer inside idem's would) and `/num` with a numeric business number.
fn answering(config: HandlerConfig) -> Router {
    let layer = IdempotencyLayer::new(Idem::new(MemoryStore::new()), Spec::new())
        .global()
        .config(config);
    Router::new()
        .route(
            "/enc",
            post(|| async {
                (
                    StatusCode::CREATED,
                    [
                        (CONTENT_TYPE, "application/json"),
                        (axum::http::header::CONTENT_ENCODING, "gzip"),
                    ],
                    &b"\x1f\x8b\x08\x00compressed"[..],
                )
            }),
        )
        .route(
            "/num",
            post(|| async {
                (
                    StatusCode::CREATED,
                    [(CONTENT_TYPE, "application/json")],
                    r#"{"id":42,"note":"a long enough note"}"#,
                )
            }),
        )
        .layer(layer)
}

/// A replay carries the `content-encoding` of the first answer (its bytes are the compressed
/// ones), and a business number rebuilt into a body (`suppress_only`, a truncated snapshot)
/// keeps its JSON type: `{"id":42}`, not `{"id":"42"}`.
#[tokio::test]
async fn replays_read_as_the_first_answer() {
    let app = answering(HandlerConfig::for_route());
    let (s1, h1, b1) = send(&app, to("POST", "/enc", "k-enc", Some("{}"))).await;
    assert_eq!(s1, StatusCode::CREATED);
    let (s2, h2, b2) = send(&app, to("POST", "/enc", "k-enc", Some("{}"))).await;
    assert_eq!(
        (s2, &h2["idempotent-replayed"]),
        (StatusCode::CREATED, &"true".parse().unwrap())
    );
    assert_eq!(h2["content-encoding"], h1["content-encoding"]);
    assert_eq!(b2, b1);

    let app = answering(HandlerConfig::for_route().contract(Contract::SuppressOnly));
    send(&app, to("POST", "/num", "k-num", Some("{}"))).await;
    let (s2, _, b2) = send(&app, to("POST", "/num", "k-num", Some("{}"))).await;
    assert_eq!((s2, &b2[..]), (StatusCode::OK, &br#"{"id":42}"#[..]));

    let app = answering(HandlerConfig::for_route().max_snapshot_bytes(16));
    send(&app, to("POST", "/num", "k-big", Some("{}"))).await;
    let (_, h2, b2) = send(&app, to("POST", "/num", "k-big", Some("{}"))).await;
    assert_eq!(h2["idempotent-snapshot"], "truncated");
    assert_eq!(b2, br#"{"id":42}"#);
}

/// What the inner service's extractor refuses (`415` without a JSON content type, `413` over
/// its body limit) is not stored, even under `exact_replay`: the corrected retry with the same
/// key runs.
#[tokio::test]
async fn an_inner_refusal_is_not_stored() {
    let hits = Arc::new(AtomicUsize::new(0));
    let handler = {
        let hits = hits.clone();
        move |axum::Json(body): axum::Json<serde_json::Value>| {
            let hits = hits.clone();
            async move {
                let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
                (
                    StatusCode::CREATED,
                    axum::Json(serde_json::json!({"id": n, "of": body})),
                )
            }
        }
    };
    let layer = IdempotencyLayer::new(Idem::new(MemoryStore::new()), Spec::new()).global();
    let app = Router::new()
        .route("/p", post(handler))
        .layer(axum::extract::DefaultBodyLimit::max(64))
        .layer(layer);
    let untyped = Request::post("/p")
        .header("idempotency-key", "k-415")
        .body(Body::from(r#"{"a":1}"#))
        .unwrap();
    let (status, _, _) = send(&app, untyped).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, headers, _) = send(&app, to("POST", "/p", "k-415", Some(r#"{"a":1}"#))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(headers.get("idempotent-replayed").is_none());

    let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(100));
    let (status, _, _) = send(&app, to("POST", "/p", "k-413", Some(&big))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, _, _) = send(&app, to("POST", "/p", "k-413", Some(r#"{"a":2}"#))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}
