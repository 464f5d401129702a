//! A payments API whose write endpoints are idempotent: the flagship example of idem (axum;
//! `examples/payments_actix.rs` serves the same API on actix-web).
//!
//! ```sh
//! cargo run --example payments          # http://127.0.0.1:3000, SQLite file ./payments.db
//! ```
//!
//! | variable | default | |
//! |---|---|---|
//! | `PAYMENTS_ADDR` | `127.0.0.1:3000` | the listening address |
//! | `DATABASE_URL` | `payments.db` | a SQLite file (created if missing; `sqlite://path` and sqlx's other SQLite URLs too, `?mode=rwc` included), or `postgres://..` / `mysql://..` (build with `--features postgres` / `mysql`) |
//! | `PAYMENTS_DELAY_MS` | `0` | processing time added inside payment creation |
//! | `PAYMENTS_SETTLE_MS` | `500` | how long a refund stays `pending` |
//! | `PAYMENTS_STORE_TIMEOUT_MS` | `2000` | the longest idem waits for one answer of the store, pool wait included (`Idem::store_timeout`) |
//! | `PAYMENTS_ENCRYPTION_KEYS` | unset | `ID:BASE64,ID:BASE64,..`: 32-byte keys that encrypt every stored response (`Idem::with_encryption`), the first the primary, the others only to read records sealed before a rotation; unset: stored in the clear; malformed: the process stops at start with one line saying why |
//! | `PAYMENTS_CORS_ORIGINS` | unset | `https://shop.example,https://admin.example`: the origins whose scripts may call the API from a browser (CORS: `Idempotency-Key`, `Content-Type`, `X-Tenant-Id`, `X-User-Id` allowed, `Idempotent-Replayed`, `Retry-After`, `Idempotency-Status`, `Idempotent-Snapshot`, `Location` exposed; `docs/http.md`, "Browsers (CORS)"); unset: no CORS middleware, browsers refuse cross-origin calls; malformed: the process stops at start with one line saying why |
//! | `PAYMENTS_LOG` | `warn` | the most detailed level printed to stderr (`error`, `warn`, `info`, `debug`, `trace`): idem warns when a lease is lost, a result cannot be stored or the store is unavailable |
//!
//! The idempotency records and the business tables (`payments`, `refunds`, `events`, each with a
//! unique constraint on the operation id) live in the same database. A payment is created in
//! idem's atomic mode (`#[idempotent(transaction = tx)]`): its row and the stored response commit
//! in one transaction, so a crash or a cancellation leaves both or neither. Refunds and events
//! use the two-commit mode, where the unique constraint on the operation id keeps a retried
//! operation's row single. `X-Tenant-Id` and
//! `X-User-Id`, both optional, scope the keys: the same key under two tenants is two operations.
//!
//! Amounts are accepted as JSON numbers or decimal strings (`100`, `"100"`, `100.00`,
//! `"100.00"` are the same amount, and the same request) and answered as decimal **strings**
//! with the scale they were sent with (`"amount": "100.00"`), so they are never rounded by a
//! JSON parser on the way back.
//!
//! # Walk-through
//!
//! Create a payment (`exact_replay`, TTL 90 days, lease 10 s):
//!
//! ```sh
//! curl -i localhost:3000/v1/payments -H 'Idempotency-Key: order-42-try' \
//!   -H 'Content-Type: application/json' \
//!   -d '{"amount": "100.00", "currency": "EUR", "customer_id": "cus_1", "order_id": "ord_42"}'
//! # HTTP/1.1 201 Created, Location: /v1/payments/pay_..
//! # {"payment_id":"pay_..","status":"succeeded","amount":"100.00","currency":"EUR",..}
//! ```
//!
//! Send it again — after a timeout, say. Same answer, byte for byte, nothing charged twice:
//! `201` with `Idempotent-Replayed: true`. `"amount": 100` is the same request, and so is one
//! with another `client_ip`, `timestamp` or `signature` (environment fields, not hashed).
//!
//! The same key with another amount is refused: `422`
//! `https://payments.example/problems/key-reused` (`application/problem+json`). A new operation needs a
//! new key.
//!
//! With `PAYMENTS_DELAY_MS=5000`, a duplicate sent while the first request still runs gets `409`
//! `https://payments.example/problems/in-progress` with `Retry-After` (seconds left on the lease).
//!
//! `"currency": "XXX"` simulates a processor failure: `500` problem+json, stored and replayed
//! (`500` again, `Idempotent-Replayed: true`). An invalid request (`amount <= 0`, a currency
//! that is not three capital letters) is a `400` that is **not** stored: the corrected retry
//! with the same key runs. No `Idempotency-Key` header: `400`
//! `https://payments.example/problems/missing-key`.
//!
//! Refund it (`latest_state`, TTL 90 days): the first answer is `201` with `"status":
//! "pending"`; a retry answers `200` with the refund's **current** state — `succeeded` once
//! `PAYMENTS_SETTLE_MS` have passed:
//!
//! ```sh
//! curl -i localhost:3000/v1/payments/pay_../refunds -H 'Idempotency-Key: refund-1' \
//!   -H 'Content-Type: application/json' -d '{"amount": "25.00"}'
//! ```
//!
//! Track an event (`suppress_only`, TTL 6 hours): `202 {"event_id": "evt_.."}`; a duplicate
//! answers `200` with the same `event_id` and records nothing:
//!
//! ```sh
//! curl -i localhost:3000/v1/events -H 'Idempotency-Key: evt-1' \
//!   -H 'Content-Type: application/json' -d '{"name": "checkout.viewed"}'
//! curl localhost:3000/v1/stats   # {"payments":1,"refunds":1,"events":1}
//! ```
//!
//! `GET /v1/payments/{id}` and `GET /v1/refunds/{id}` read them back (`404` problem+json when
//! unknown).
//!
//! # API description
//!
//! Built with `--features utoipa`, `GET /openapi.json` answers the API's OpenAPI 3.1 document:
//! every route, each handler described by its `#[utoipa::path]` (`payments/api.rs`, the shared
//! answers in `payments/openapi.rs`), and on the three POSTs what idem adds from their
//! `#[idempotent]`: the required `Idempotency-Key` parameter, the `400`/`409`/`422`/`503`
//! problems, `Retry-After`, `Idempotent-Replayed` on the successes, and `x-idempotency` with
//! the contract, the TTL and the scope. Without the feature the route is absent.
//!
//! ```sh
//! cargo run --example payments --features utoipa
//! curl -s localhost:3000/openapi.json | jq '.paths."/v1/payments".post."x-idempotency"'
//! # {"contract":"exact_replay","key":{"in":"header","name":"Idempotency-Key"},"scope":[..],"ttl":"P90D",..}
//! ```
//!
//! # Metrics
//!
//! `GET /metrics` answers what the process records, in Prometheus' text format
//! (`metrics-exporter-prometheus`, installed as the process's recorder by the first app built):
//! idem's series (`idem_requests_total`, `idem_settlements_total`, `idem_handler_seconds`,
//! `idem_store_seconds`, `idem_in_flight`, ..., labelled by `operation="POST /v1/payments"` and
//! `backend`; `docs/operations.md`), the `_seconds` histograms with buckets, and the example's
//! own `payments_http_requests_total{method, route, status}`: every HTTP answer by method,
//! route template and status, replays, `409`s and `422`s included.
//!
//! ```sh
//! curl -s localhost:3000/metrics | grep '^idem_requests_total'
//! # idem_requests_total{operation="POST /v1/payments",backend="sqlite",outcome="fresh"} 1
//! ```
//!
//! `docs/operations.md` has the queries and alert rules that matter, and
//! `docs/grafana-dashboard.json` a dashboard of them.

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::cors::{AllowOrigin, CorsLayer};

#[path = "payments/api.rs"]
mod api;
#[path = "payments/db.rs"]
mod db;
#[path = "payments/model.rs"]
mod model;
#[path = "payments/openapi.rs"]
mod openapi;
#[path = "payments/ops.rs"]
mod ops;
#[path = "payments/service.rs"]
mod service;

pub use ops::prometheus;
pub use service::{BoxError, Config};

/// Opens the store named by `database_url` (a SQLite file path or one of sqlx's SQLite URLs,
/// `postgres://..`, `mysql://..`), runs its migrations, creates the business tables in the same
/// database, and returns the API and `GET /metrics` (every answer counted), behind a CORS layer
/// when `config.cors_origins` names origins.
pub async fn app(database_url: &str, config: Config) -> Result<Router, BoxError> {
    let cors = cors(&config.cors_origins);
    let metrics = ops::metrics_handle(config.metrics.as_ref());
    let state = service::open(database_url, config).await?;
    let router = Router::new()
        .route("/v1/payments", post(api::create_payment))
        .route("/v1/payments/{id}", get(api::get_payment))
        .route("/v1/payments/{id}/refunds", post(api::create_refund))
        .route("/v1/refunds/{id}", get(api::get_refund))
        .route("/v1/events", post(api::track_event))
        .route("/v1/stats", get(api::stats))
        .route("/metrics", get(move || render(metrics)));
    let router = match description() {
        Some(document) => router.route("/openapi.json", get(move || serve_description(document))),
        None => router,
    };
    let router = router.layer(middleware::from_fn(count)).with_state(state);
    Ok(match cors {
        Some(cors) => router.layer(cors),
        None => router,
    })
}

/// `GET /metrics`: the recorder's series in Prometheus' text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(openapi::Metrics)
)]
async fn render(metrics: PrometheusHandle) -> ([(HeaderName, &'static str); 1], String) {
    (
        [(CONTENT_TYPE, ops::METRICS_CONTENT_TYPE)],
        metrics.render(),
    )
}

/// This server's API description (`payments/openapi.rs`), as JSON; `None` without
/// `--features utoipa`.
fn description() -> Option<String> {
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(
        api::create_payment,
        api::get_payment,
        api::create_refund,
        api::get_refund,
        api::track_event,
        api::stats,
        render,
        serve_description,
    ))]
    struct Paths;

    openapi::json(
        <Paths as utoipa::OpenApi>::openapi(),
        concat!(module_path!(), "::api"),
    )
}

/// `GET /openapi.json`: [`description`].
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses(openapi::Description)
)]
async fn serve_description(document: String) -> ([(HeaderName, &'static str); 1], String) {
    ([(CONTENT_TYPE, "application/json")], document)
}

/// Counts each answer in `payments_http_requests_total` by method, route template and status.
async fn count(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let response = next.run(req).await;
    ops::count_request(
        method.as_str(),
        route.as_ref().map(MatchedPath::as_str),
        response.status().as_u16(),
    );
    response
}

/// The CORS layer of `origins` (none: no layer): it answers preflights and exposes idem's
/// headers to the scripts of those origins (`idem::http::CORS_EXPOSE_HEADERS`).
fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let origins = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok());
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST])
            .allow_headers(
                ops::allowed_headers()
                    .map(HeaderName::from_static)
                    .collect::<Vec<_>>(),
            )
            .expose_headers(ops::CORS_EXPOSE_HEADERS.map(HeaderName::from_static)),
    )
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service::exit_code(serve().await)
}

/// Reads the environment, opens the store, listens and serves; a start-up failure is one line.
async fn serve() -> Result<(), BoxError> {
    let (addr, url, config) = service::from_env("127.0.0.1:3000")?;
    let router = app(&url, config).await?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| service::cannot_listen(&addr, &e))?;
    eprintln!(
        "payments: listening on http://{} (store: {})",
        listener.local_addr()?,
        service::store_name(&url)
    );
    axum::serve(listener, router).await?;
    Ok(())
}
