//! The API description of idempotent handlers: a utoipa document described by
//! `idem::openapi::Idempotency` carries, per `#[idempotent]` operation, the key parameter, the
//! problem answers, the replay header and `x-idempotency`, whichever order the two attributes
//! are written in; other operations are untouched. The routes behind the tower layer and the
//! actix-web middleware gain the same parts on their unsafe methods, at the paths named, with
//! what the middleware is configured with. So does an aide `ApiRouter` finished with
//! `idem::openapi::aide::idempotency` ([`aide_app`]).

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
#[idempotent(scope = [header("X-Tenant-Id")], ttl = "24h", remember = "90d")]
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
    // `410 key-expired` too: the key is remembered past its TTL.
    for status in ["400", "409", "410", "422", "503"] {
        assert_eq!(
            responses[status]["content"]["application/problem+json"]["schema"], problem,
            "{status}"
        );
    }
    assert!(
        responses["410"]["description"]
            .as_str()
            .unwrap()
            .contains("biz_no")
    );
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
            "remember": "P90D",
            "remember_seconds": 7776000,
            "key": { "in": "header", "name": "Idempotency-Key" },
            "scope": ["header(\"X-Tenant-Id\")"],
        })
    );
    assert_eq!(op["x-fern-idempotent"], true);
    let schema = &doc["components"]["schemas"]["IdempotencyProblem"];
    assert_eq!(schema["required"], json!(["type", "title", "status"]));
    for member in [
        "biz_no",
        "operation_id",
        "expired_at",
        "remember_until",
        "key_expires_at",
        "waited",
    ] {
        assert!(schema["properties"][member].is_object(), "{member}");
    }
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
    // Not remembered past its TTL: no `410`, no `remember`.
    assert!(op["responses"].get("410").is_none());
    assert!(op["x-idempotency"].get("remember").is_none());
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

// The routes behind the tower layer: plain handlers.

/// Issues a refund.
#[utoipa::path(
    post,
    path = "/v1/refunds",
    responses((status = 201, description = "Created"), (status = 404, description = "No such charge")),
)]
async fn create_refund() -> (StatusCode, &'static str) {
    (StatusCode::CREATED, r#"{"id":"re_1"}"#)
}

#[utoipa::path(get, path = "/v1/refunds", responses((status = 200, description = "The refunds")))]
async fn list_refunds() -> &'static str {
    "[]"
}

#[utoipa::path(
    get,
    path = "/v1/refunds/{id}",
    params(("id" = String, Path)),
    responses((status = 200, description = "The refund")),
)]
async fn get_refund() -> &'static str {
    r#"{"id":"re_1"}"#
}

#[utoipa::path(
    put,
    path = "/v1/refunds/{id}",
    params(("id" = String, Path)),
    responses((status = 200, description = "Updated")),
)]
async fn update_refund() -> &'static str {
    r#"{"id":"re_1"}"#
}

#[utoipa::path(
    delete,
    path = "/v1/refunds/{id}",
    params(("id" = String, Path)),
    responses((status = 204, description = "Cancelled")),
)]
async fn cancel_refund() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// Not behind the layer.
#[utoipa::path(post, path = "/v1/notes", responses((status = 201, description = "Noted")))]
async fn create_note() -> StatusCode {
    StatusCode::CREATED
}

#[derive(OpenApi)]
#[openapi(paths(
    create_order,
    health,
    create_refund,
    list_refunds,
    get_refund,
    update_refund,
    cancel_refund,
    create_note,
))]
struct LayeredDoc;

const REFUND_TTL: std::time::Duration = std::time::Duration::from_secs(36 * 3_600);

fn tenant(parts: &axum::http::request::Parts) -> Option<Vec<String>> {
    let tenant = parts.headers.get("x-tenant-id")?.to_str().ok()?;
    Some(vec![tenant.to_owned()])
}

/// A layer with its own key header, contract, TTL and a named scope.
fn refunds_layer() -> idem::IdempotencyLayer {
    idem::IdempotencyLayer::new(
        idem::Idem::new(idem::MemoryStore::new()),
        idem::json::Spec::new(),
    )
    .header("X-Refund-Key")
    .config(
        idem::HandlerConfig::for_route()
            .contract(idem::Contract::SuppressOnly)
            .ttl(REFUND_TTL),
    )
    .scope_named(["header(\"X-Tenant-Id\")"], tenant)
}

/// The layer covers `/v1/refunds` and `/v1/refunds/{id}`, not `/v1/notes`.
fn refunds_app(layer: idem::IdempotencyLayer) -> axum::Router {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/v1/refunds", post(create_refund).get(list_refunds))
        .route(
            "/v1/refunds/{id}",
            get(get_refund).put(update_refund).delete(cancel_refund),
        )
        .layer(layer)
        .merge(axum::Router::new().route("/v1/notes", post(create_note)))
        .route("/health", get(health))
}

fn layered_document() -> Value {
    use utoipa::Modify as _;
    let mut openapi = LayeredDoc::openapi();
    // This module's handlers only: the program has other `create_refund`s (the payments
    // example's).
    Idempotency::new()
        .within(module_path!())
        .layer(&refunds_layer(), ["/v1/refunds", "/v1/refunds/{id}"])
        .modify(&mut openapi);
    serde_json::to_value(openapi).unwrap()
}

/// The `x-idempotency` of the refunds layer's operations.
fn refunds_extension() -> Value {
    json!({
        "contract": "suppress_only",
        "ttl": "P1DT12H",
        "ttl_seconds": 129600,
        "key": { "in": "header", "name": "X-Refund-Key" },
        "scope": ["header(\"X-Tenant-Id\")"],
    })
}

/// Every part an operation behind the refunds layer gains, its `2xx` answers named.
fn assert_described(op: &Value, successes: &[&str], what: &str) {
    let key = &op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["in"] == "header")
        .unwrap_or_else(|| panic!("{what}: no header parameter: {op}"));
    assert_eq!(
        (&key["name"], &key["required"], &key["schema"]["maxLength"]),
        (&json!("X-Refund-Key"), &json!(true), &json!(257)),
        "{what}"
    );
    let description = key["description"].as_str().unwrap();
    assert!(description.contains("36 hours"), "{what}: {description}");
    let responses = &op["responses"];
    let problem = json!({ "$ref": "#/components/schemas/IdempotencyProblem" });
    for status in ["400", "409", "422", "503"] {
        assert_eq!(
            responses[status]["content"]["application/problem+json"]["schema"], problem,
            "{what} {status}"
        );
        let retry_after = responses[status]["headers"].get("Retry-After").is_some();
        assert_eq!(
            retry_after,
            matches!(status, "409" | "503"),
            "{what} {status}"
        );
    }
    for status in successes {
        assert!(
            responses[status]["headers"]["Idempotent-Replayed"].is_object(),
            "{what} {status}"
        );
    }
    assert_eq!(op["x-idempotency"], refunds_extension(), "{what}");
    assert_eq!(op["x-fern-idempotent"], true, "{what}");
}

fn assert_untouched(op: &Value, what: &str) {
    assert!(op.is_object(), "{what}: no such operation");
    assert!(
        op.get("parameters").is_none_or(|p| p
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["in"] != "header")),
        "{what}: {op}"
    );
    assert!(op.get("x-idempotency").is_none(), "{what}");
    assert!(op.get("x-fern-idempotent").is_none(), "{what}");
    let responses = op["responses"].as_object().unwrap();
    assert!(
        responses
            .keys()
            .all(|s| !["400", "409", "422", "503"].contains(&s.as_str())),
        "{what}: {op}"
    );
    assert!(
        responses.values().all(|r| r.get("headers").is_none()),
        "{what}: {op}"
    );
}

#[test]
fn the_layers_unsafe_routes_say_what_the_layer_does() {
    let doc = layered_document();
    let paths = &doc["paths"];
    assert_described(&paths["/v1/refunds"]["post"], &["201"], "POST /v1/refunds");
    // Not a success: no replay header on the 404.
    assert!(
        paths["/v1/refunds"]["post"]["responses"]["404"]
            .get("headers")
            .is_none()
    );
    assert_described(
        &paths["/v1/refunds/{id}"]["put"],
        &["200"],
        "PUT /v1/refunds/{id}",
    );
    assert_described(
        &paths["/v1/refunds/{id}"]["delete"],
        &["204"],
        "DELETE /v1/refunds/{id}",
    );
    // The path parameter declared by the user is kept, beside the key.
    let params = paths["/v1/refunds/{id}"]["delete"]["parameters"]
        .as_array()
        .unwrap();
    assert_eq!(params.len(), 2, "{params:?}");
    assert!(
        params
            .iter()
            .any(|p| p["name"] == "id" && p["in"] == "path")
    );
    assert!(doc["components"]["schemas"]["IdempotencyProblem"].is_object());
}

#[test]
fn safe_methods_and_paths_not_named_are_untouched() {
    let doc = layered_document();
    let paths = &doc["paths"];
    assert_untouched(&paths["/v1/refunds"]["get"], "GET /v1/refunds");
    assert_untouched(&paths["/v1/refunds/{id}"]["get"], "GET /v1/refunds/{id}");
    assert_eq!(
        paths["/v1/refunds/{id}"]["get"]["parameters"],
        json!([{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }])
    );
    assert_untouched(&paths["/v1/notes"]["post"], "POST /v1/notes");
    assert_untouched(&paths["/health"]["get"], "GET /health");
}

#[test]
fn the_layers_modifier_describes_the_annotated_handlers_too() {
    let doc = layered_document();
    let order = &doc["paths"]["/orders"]["post"];
    assert_eq!(order["parameters"][0]["name"], "Idempotency-Key");
    assert_eq!(
        order["x-idempotency"]["scope"],
        json!(["header(\"X-Tenant-Id\")"])
    );
    assert_eq!(order["x-idempotency"]["ttl"], "P1D");
}

#[test]
fn paths_take_the_routers_spelling_and_a_path_not_in_the_document_changes_nothing() {
    let doc = refunds_layer().doc();
    let described = |paths: &[&str]| {
        let mut document = serde_json::to_value(LayeredDoc::openapi()).unwrap();
        let missing = idem::openapi::describe_paths(&mut document, &doc, paths);
        (document, missing)
    };
    // axum 0.7's `:id`, and another parameter name: the same path.
    let (document, missing) = described(&["/v1/refunds/:refund_id"]);
    assert!(missing.is_empty());
    assert_eq!(
        document["paths"]["/v1/refunds/{id}"]["put"]["x-idempotency"],
        refunds_extension()
    );
    assert!(
        document["paths"]["/v1/refunds"]["post"]
            .get("x-idempotency")
            .is_none()
    );
    let (document, missing) = described(&["/v1/refund"]);
    assert_eq!(missing, ["/v1/refund"]);
    assert_eq!(
        document,
        serde_json::to_value(LayeredDoc::openapi()).unwrap()
    );
}

#[test]
fn the_layers_description_is_its_configuration() {
    use idem::openapi::LayerDoc;
    assert_eq!(
        refunds_layer().doc(),
        LayerDoc {
            contract: idem::Contract::SuppressOnly,
            ttl: REFUND_TTL,
            remember: None,
            header: "X-Refund-Key".into(),
            scope: vec!["header(\"X-Tenant-Id\")".into()],
        }
    );
    let idem = || idem::Idem::new(idem::MemoryStore::new());
    let plain = idem::IdempotencyLayer::new(idem(), idem::json::Spec::new());
    let doc = plain.clone().global().doc();
    assert_eq!(
        (doc.contract, doc.ttl, doc.header.as_str(), doc.scope.len()),
        (
            idem::Contract::ExactReplay,
            idem::HandlerConfig::DEFAULT_TTL,
            "Idempotency-Key",
            0
        )
    );
    assert_eq!(plain.doc().scope, ["default"]);
    assert_eq!(plain.clone().scope(tenant).doc().scope, ["scope(..)"]);
    // Without a lookup the layer replays `latest_state` exactly, and says so.
    let latest =
        plain.config(idem::HandlerConfig::for_route().contract(idem::Contract::LatestState));
    assert_eq!(latest.doc().contract, idem::Contract::ExactReplay);
}

#[tokio::test]
async fn the_described_layer_serves_as_described() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt as _;
    let app = refunds_app(refunds_layer());
    let call = |method: &str, path: &str, key: Option<&str>| {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("x-tenant-id", "acme");
        if let Some(key) = key {
            request = request.header("X-Refund-Key", key);
        }
        app.clone().oneshot(request.body(Body::empty()).unwrap())
    };
    // The described unsafe methods need the described header.
    for (method, path) in [
        ("POST", "/v1/refunds"),
        ("PUT", "/v1/refunds/re_1"),
        ("DELETE", "/v1/refunds/re_1"),
    ] {
        let missing = call(method, path, None).await.unwrap();
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST, "{method} {path}");
        let first = call(method, path, Some("k-1")).await.unwrap();
        assert!(first.status().is_success(), "{method} {path}");
        let retry = call(method, path, Some("k-1")).await.unwrap();
        assert_eq!(
            retry.headers()["idempotent-replayed"],
            "true",
            "{method} {path}"
        );
    }
    // The methods and paths left undescribed are not the layer's.
    for (method, path) in [
        ("GET", "/v1/refunds"),
        ("GET", "/v1/refunds/re_1"),
        ("POST", "/v1/notes"),
    ] {
        let response = call(method, path, None).await.unwrap();
        assert!(response.status().is_success(), "{method} {path}");
    }
}

#[cfg(feature = "actix")]
#[test]
fn the_actix_middlewares_description_is_its_configuration() {
    use idem::actix::Idempotency as Middleware;
    use idem::openapi::{LayerDoc, describe_paths};
    let middleware = Middleware::new(
        idem::Idem::new(idem::MemoryStore::new()),
        idem::json::Spec::new(),
    )
    .header("x-payout-key")
    .config(
        idem::HandlerConfig::new("payouts.create").ttl(std::time::Duration::from_secs(90 * 86_400)),
    )
    .scope_named(["caller.tenant_id", "caller.user_id"], |_| None);
    let doc = LayerDoc {
        contract: idem::Contract::ExactReplay,
        ttl: std::time::Duration::from_secs(90 * 86_400),
        remember: None,
        header: "X-Payout-Key".into(),
        scope: vec!["caller.tenant_id".into(), "caller.user_id".into()],
    };
    assert_eq!(middleware.doc(), doc);
    assert_eq!(LayerDoc::from(&middleware), doc);
    let mut document = json!({
        "openapi": "3.1.0",
        "paths": {
            "/v1/payouts": {
                "post": { "responses": { "202": { "description": "Accepted" } } },
                "get": { "responses": { "200": { "description": "The payouts" } } },
            },
            "/v1/balance": { "patch": { "responses": {} } },
        },
    });
    assert!(describe_paths(&mut document, &middleware.doc(), ["/v1/payouts"]).is_empty());
    let post = &document["paths"]["/v1/payouts"]["post"];
    assert_eq!(post["parameters"][0]["name"], "X-Payout-Key");
    assert!(post["responses"]["202"]["headers"]["Idempotent-Replayed"].is_object());
    for status in ["409", "503"] {
        assert!(post["responses"][status]["headers"]["Retry-After"].is_object());
    }
    assert_eq!(
        post["x-idempotency"],
        json!({
            "contract": "exact_replay",
            "ttl": "P90D",
            "ttl_seconds": 7776000,
            "key": { "in": "header", "name": "X-Payout-Key" },
            "scope": ["caller.tenant_id", "caller.user_id"],
        })
    );
    assert_eq!(post["x-fern-idempotent"], true);
    assert_eq!(
        document["paths"]["/v1/payouts"]["get"],
        json!({ "responses": { "200": { "description": "The payouts" } } })
    );
    assert_eq!(
        document["paths"]["/v1/balance"],
        json!({ "patch": { "responses": {} } })
    );
    assert!(document["components"]["schemas"]["IdempotencyProblem"].is_object());
}
#[cfg(feature = "aide")]
mod aide_app;
