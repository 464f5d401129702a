//! An aide `ApiRouter` of `#[idempotent]` handlers, finished with
//! `idem::openapi::aide::idempotency`: each idempotent operation carries its handler's key
//! parameter, the problem answers with `Retry-After`, the replay header on its declared
//! successes, `x-idempotency` and `x-fern-idempotent`, beside what aide reads from the other
//! extractors; the plain route is untouched; the routed handlers still replay.

use ::aide::axum::ApiRouter;
use ::aide::axum::routing::{get, post_with, put_with};
use ::aide::openapi::OpenApi;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{Request, StatusCode};
use idem::axum::Json;
use idem::openapi::aide::idempotency;
use idem::{Fingerprint, Idem, MemoryStore, Snapshot, idempotent};
use serde_json::{Value, json};
use tower::ServiceExt;

#[derive(Fingerprint, serde::Deserialize, schemars::JsonSchema)]
struct PlaceOrder {
    sku: String,
    quantity: u32,
}

#[derive(Fingerprint, serde::Deserialize, schemars::JsonSchema)]
struct CancelOrder {
    reason: String,
}

#[derive(Fingerprint, serde::Deserialize, schemars::JsonSchema)]
struct OrderPath {
    id: String,
}

#[derive(Snapshot, serde::Serialize, schemars::JsonSchema)]
struct Receipt {
    #[snapshot(biz_no)]
    id: String,
}

/// What the route itself declares for `409`.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct OutOfStock {
    sku: String,
}

#[idempotent(scope = [header("X-Tenant-Id")], ttl = "24h")]
async fn place_order(Json(req): Json<PlaceOrder>) -> (StatusCode, Json<Receipt>) {
    let id = format!("ord_{}_{}", req.sku, req.quantity);
    (StatusCode::CREATED, Json(Receipt { id }))
}

#[idempotent(
    scope = global,
    key = header("X-Request-Id"),
    contract = "suppress_only",
    ttl = "90s",
)]
async fn cancel_order(Path(path): Path<OrderPath>, Json(req): Json<CancelOrder>) -> Json<Receipt> {
    Json(Receipt {
        id: format!("{}_{}", path.id, req.reason.len()),
    })
}

#[idempotent(operation = "stock.adjust", scope = default)]
async fn adjust_stock(Json(req): Json<PlaceOrder>) -> Json<Receipt> {
    Json(Receipt { id: req.sku })
}

async fn health() -> &'static str {
    "ok"
}

/// The application, and its API document.
fn app() -> (axum::Router, Value) {
    let mut api = OpenApi::default();
    let router = ApiRouter::new()
        .api_route(
            "/orders",
            post_with(place_order, |op| {
                op.response::<201, Json<Receipt>>()
                    .response_with::<409, Json<OutOfStock>, _>(|r| r.description("Out of stock"))
            }),
        )
        .api_route(
            "/orders/{id}/cancel",
            post_with(cancel_order, |op| op.response::<200, Json<Receipt>>()),
        )
        .api_route(
            "/stock",
            put_with(adjust_stock, |op| op.response::<200, Json<Receipt>>()),
        )
        .api_route("/health", get(health))
        .finish_api_with(&mut api, |api| api.title("orders").with(idempotency))
        .with_state(Idem::new(MemoryStore::new()));
    (router, serde_json::to_value(&api).unwrap())
}

/// The parameter of `op` named `name`.
fn parameter<'a>(op: &'a Value, name: &str) -> &'a Value {
    op["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no parameter {name}: {op}"))
}

/// The parts every idempotent operation has: the key parameter (a header, required, its TTL
/// in words), the problem answers, `Retry-After` on `409` and `503` only, the replay header on
/// the declared successes `ok` only, `x-fern-idempotent`.
fn assert_idempotent(op: &Value, key: &str, ttl_words: &str, ok: &[&str]) {
    let key = parameter(op, key);
    assert_eq!(
        (&key["in"], &key["required"]),
        (&json!("header"), &json!(true))
    );
    assert_eq!(key["schema"]["maxLength"], 257, "{key}");
    let description = key["description"].as_str().unwrap();
    assert!(description.contains(ttl_words), "{description}");
    let responses = op["responses"].as_object().unwrap();
    let problem = json!({ "$ref": "#/components/schemas/IdempotencyProblem" });
    for status in ["400", "409", "422", "503"] {
        let response = &responses[status];
        assert_eq!(
            response["content"]["application/problem+json"]["schema"], problem,
            "{status}"
        );
        let retry_after = response["headers"].get("Retry-After").is_some();
        assert_eq!(retry_after, matches!(status, "409" | "503"), "{status}");
    }
    for (status, response) in responses {
        let replayed = response["headers"].get("Idempotent-Replayed").is_some();
        assert_eq!(replayed, ok.contains(&status.as_str()), "{status}");
    }
    assert_eq!(op["x-fern-idempotent"], true);
}

#[test]
fn an_idempotent_operation_says_what_a_caller_must_know() {
    let (_, doc) = app();
    let op = &doc["paths"]["/orders"]["post"];
    assert_idempotent(op, "Idempotency-Key", "1 day", &["201"]);
    assert_eq!(
        op["x-idempotency"],
        json!({
            "contract": "exact_replay",
            "ttl": "P1D",
            "ttl_seconds": 86400,
            "key": { "in": "header", "name": "Idempotency-Key" },
            "scope": ["header(\"X-Tenant-Id\")"],
        })
    );
    // What aide reads from the other extractors and the route declares is there too.
    assert_eq!(
        op["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/PlaceOrder"
    );
    let responses = &op["responses"];
    assert_eq!(
        responses["201"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Receipt"
    );
    // The route's own `409` is kept, and gains the problem document and `Retry-After`.
    assert_eq!(responses["409"]["description"], "Out of stock");
    assert_eq!(
        responses["409"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/OutOfStock"
    );
    assert_eq!(
        doc["components"]["schemas"]["IdempotencyProblem"],
        idem::openapi::problem_schema()
    );
    assert!(doc["components"]["schemas"]["PlaceOrder"].is_object());
}

#[test]
fn each_handler_is_described_by_its_own_attribute() {
    let (_, doc) = app();
    let cancel = &doc["paths"]["/orders/{id}/cancel"]["post"];
    assert_idempotent(cancel, "X-Request-Id", "90 seconds", &["200"]);
    assert_eq!(
        cancel["x-idempotency"],
        json!({
            "contract": "suppress_only",
            "ttl": "PT1M30S",
            "ttl_seconds": 90,
            "key": { "in": "header", "name": "X-Request-Id" },
            "scope": [],
        })
    );
    // The path parameter aide reads from `Path<OrderPath>`, and no default key header.
    assert_eq!(parameter(cancel, "id")["in"], "path");
    assert_eq!(cancel["parameters"].as_array().unwrap().len(), 2);

    let adjust = &doc["paths"]["/stock"]["put"];
    assert_idempotent(adjust, "Idempotency-Key", "7 days", &["200"]);
    assert_eq!(adjust["x-idempotency"]["ttl"], "P7D");
    assert_eq!(adjust["x-idempotency"]["scope"], json!(["default"]));
    assert_eq!(adjust["x-idempotency"]["contract"], "exact_replay");
}

#[test]
fn the_plain_route_is_untouched() {
    let (_, doc) = app();
    let health = &doc["paths"]["/health"]["get"];
    assert!(health.get("parameters").is_none(), "{health}");
    assert!(health.get("x-idempotency").is_none());
    assert!(health.get("x-fern-idempotent").is_none());
    let responses = health["responses"].as_object().unwrap();
    assert_eq!(responses.keys().collect::<Vec<_>>(), ["200"], "{health}");
    assert!(responses["200"].get("headers").is_none(), "{health}");
}

#[tokio::test]
async fn the_routed_handlers_replay() {
    let (router, _) = app();
    let request = || {
        Request::post("/orders")
            .header("content-type", "application/json")
            .header("idempotency-key", "k1")
            .header("x-tenant-id", "acme")
            .body(Body::from(r#"{"sku":"tea","quantity":2}"#))
            .unwrap()
    };
    let first = router.clone().oneshot(request()).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let retry = router.oneshot(request()).await.unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
}
