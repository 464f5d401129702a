//! The API description of idempotent handlers: a utoipa document described by
//! `idem::openapi::Idempotency` carries, per `#[idempotent]` operation, the key parameter, the
//! problem answers, the replay header and `x-idempotency`, whichever order the two attributes
//! are written in; other operations are untouched.

use axum::http::StatusCode;
use idem::axum::Json;
use idem::openapi::Idempotency;
use idem::{Fingerprint, Snapshot, idempotent};
use serde_json::{Value, json};
use utoipa::OpenApi;

#[derive(Fingerprint, serde::Deserialize, utoipa::ToSchema)]
struct CreateOrder {
    amount: u64,
}

#[derive(Snapshot, serde::Serialize, utoipa::ToSchema)]
struct Order {
    #[snapshot(biz_no)]
    id: String,
}

/// Creates an order.
#[utoipa::path(
    post,
    path = "/orders",
    request_body = CreateOrder,
    responses((status = 201, description = "Created", body = Order)),
)]
#[idempotent(scope = [header("X-Tenant-Id")], ttl = "24h")]
async fn create_order(Json(req): Json<CreateOrder>) -> (StatusCode, Json<Order>) {
    let id = format!("ord_{}", req.amount);
    (StatusCode::CREATED, Json(Order { id }))
}

/// Refunds an order; the attributes in the other order, a named operation and key header.
#[idempotent(
    scope = global,
    operation = "orders.refund",
    key = header("X-Request-Id"),
    contract = "suppress_only",
)]
#[utoipa::path(
    post,
    path = "/orders/refunds",
    operation_id = "orders.refund",
    responses((status = 200, description = "Refunded", body = Order)),
)]
async fn refund(Json(req): Json<CreateOrder>) -> Json<Order> {
    Json(Order {
        id: format!("re_{}", req.amount),
    })
}

#[utoipa::path(get, path = "/health", responses((status = 200, description = "Alive")))]
async fn health() -> &'static str {
    "ok"
}

#[derive(OpenApi)]
#[openapi(
    paths(create_order, refund, health),
    modifiers(&Idempotency),
)]
struct ApiDoc;

fn document() -> Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap()
}

#[test]
fn an_idempotent_operation_says_what_a_caller_must_know() {
    let doc = document();
    let op = &doc["paths"]["/orders"]["post"];
    let key = &op["parameters"][0];
    assert_eq!(
        (&key["name"], &key["in"], &key["required"]),
        (&json!("Idempotency-Key"), &json!("header"), &json!(true))
    );
    assert_eq!(key["schema"]["maxLength"], 257);
    let description = key["description"].as_str().unwrap();
    assert!(
        description.contains("same key with the same request"),
        "{description}"
    );
    assert!(description.contains("1 day"), "{description}");
    let responses = &op["responses"];
    // The user's own answer is kept and marks its replays.
    assert_eq!(responses["201"]["description"], "Created");
    assert!(responses["201"]["content"]["application/json"].is_object());
    assert!(responses["201"]["headers"]["Idempotent-Replayed"].is_object());
    let problem = json!({ "$ref": "#/components/schemas/IdempotencyProblem" });
    for status in ["400", "409", "422", "503"] {
        assert_eq!(
            responses[status]["content"]["application/problem+json"]["schema"], problem,
            "{status}"
        );
    }
    for status in ["409", "503"] {
        assert!(
            responses[status]["headers"]["Retry-After"].is_object(),
            "{status}"
        );
    }
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
    assert_eq!(op["x-fern-idempotent"], true);
    let schema = &doc["components"]["schemas"]["IdempotencyProblem"];
    assert_eq!(schema["required"], json!(["type", "title", "status"]));
    // The user's schemas are still there.
    assert!(doc["components"]["schemas"]["Order"].is_object());
}

#[test]
fn a_named_operation_matches_in_either_attribute_order() {
    let doc = document();
    let op = &doc["paths"]["/orders/refunds"]["post"];
    assert_eq!(op["parameters"][0]["name"], "X-Request-Id");
    assert_eq!(op["x-idempotency"]["contract"], "suppress_only");
    assert_eq!(op["x-idempotency"]["scope"], json!([]));
    // The default TTL, 7 days.
    assert_eq!(op["x-idempotency"]["ttl"], "P7D");
    assert!(op["responses"]["200"]["headers"]["Idempotent-Replayed"].is_object());
}

#[test]
fn other_operations_are_untouched() {
    let doc = document();
    let health = &doc["paths"]["/health"]["get"];
    assert!(health.get("parameters").is_none(), "{health}");
    assert!(health.get("x-idempotency").is_none());
    assert_eq!(health["responses"].as_object().unwrap().len(), 1);
}

#[test]
fn the_described_handlers_serve_as_written() {
    use axum::routing::{get, post};
    let _: axum::Router = axum::Router::new()
        .route("/orders", post(create_order))
        .route("/orders/refunds", post(refund))
        .route("/health", get(health))
        .with_state(idem::Idem::new(idem::MemoryStore::new()));
}

#[test]
fn every_annotated_handler_is_registered() {
    let names: Vec<&str> = idem::openapi::handlers()
        .iter()
        .map(|h| h.function)
        .collect();
    for name in ["create_order", "refund"] {
        assert!(names.contains(&name), "{names:?}");
    }
    assert!(!names.contains(&"health"));
}
