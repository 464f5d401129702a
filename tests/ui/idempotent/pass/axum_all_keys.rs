// An axum handler with every key of `#[idempotent]`, routed: the expansion is a valid axum
// handler (`IdemContext` first, `Response` out) and compiles warning-free.
#![deny(warnings)]

use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use axum::{Json, Router};
use idem::{Fingerprint, Idem, Snapshot};
use rust_decimal::Decimal;

#[derive(Clone)]
struct App {
    idem: Idem,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

struct Auth {
    tenant_id: String,
    user_id: u64,
}

impl<S: Send + Sync> FromRequestParts<S> for Auth {
    type Rejection = StatusCode;
    async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        Ok(Auth {
            tenant_id: "acme".into(),
            user_id: 7,
        })
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: Decimal,
    currency: String,
    customer_id: String,
    order_id: String,
    note: Option<String>,
    #[fingerprint(env)]
    client_ip: Option<String>,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
    amount: Decimal,
}

struct ApiError;

impl axum::response::IntoResponse for ApiError {
    fn into_response(self) -> axum::response::Response {
        StatusCode::BAD_REQUEST.into_response()
    }
}

/// Creates a payment, at most once per key.
#[idem::idempotent(
    key = header("Idempotency-Key"),
    scope = [auth.tenant_id, auth.user_id, header("X-Region")],
    fingerprint(fields = [amount, currency, customer_id, order_id]),
    ttl = "90d",
    lease = "10s",
    timeout = "1m",
    contract = "exact_replay",
    operation = "payments.create",
    headers = ["X-Request-Cost"],
    fail_open = false,
    max_snapshot_bytes = 64 * 1024,
    crate = "::idem",
)]
async fn create_payment(
    State(app): State<App>,
    auth: Auth,
    Json(mut req): Json<CreatePayment>,
) -> Result<(StatusCode, Json<Payment>), ApiError> {
    let _ = &app.idem;
    if req.amount.is_sign_negative() {
        return Err(ApiError);
    }
    let cents: i64 = req
        .amount
        .mantissa()
        .to_string()
        .parse()
        .map_err(|_| ApiError)?;
    let _ = cents;
    req.note = req.note.take().filter(|n| !n.is_empty());
    let id = format!("pay_{}_{}_{:?}", auth.tenant_id, auth.user_id, req.note);
    let amount: Decimal = req.amount.round_dp(2);
    Ok((StatusCode::CREATED, Json(Payment { id, amount })))
}

#[derive(serde::Serialize, Snapshot)]
struct Order {
    #[snapshot(biz_no)]
    order_no: u64,
    status: &'static str,
}

#[derive(serde::Deserialize, Fingerprint)]
struct PlaceOrder {
    sku: String,
}

async fn find_order(app: App, order_no: String) -> Result<Json<Order>, StatusCode> {
    let _ = app;
    let order_no = order_no.parse().map_err(|_| StatusCode::NOT_FOUND)?;
    Ok(Json(Order {
        order_no,
        status: "shipped",
    }))
}

#[idem::idempotent(
    scope = default,
    contract = "latest_state",
    lookup = {
        let app = app.clone();
        move |order_no| find_order(app, order_no)
    },
    fingerprint(arg = body),
)]
async fn place_order(State(app): State<App>, body: Json<PlaceOrder>) -> (StatusCode, Json<Order>) {
    let _ = (&app.idem, &body.sku);
    (
        StatusCode::CREATED,
        Json(Order {
            order_no: 1,
            status: "placed",
        }),
    )
}

/// The key from the path (a client-chosen cancellation id), not from a header.
#[idem::idempotent(
    key = cancellation_id,
    scope = global,
    contract = "suppress_only",
    lease = "1500ms",
    ttl = "1h30m"
)]
async fn cancel_order(
    axum::extract::Path(cancellation_id): axum::extract::Path<String>,
    Json(req): Json<PlaceOrder>,
) -> Json<Order> {
    let _ = (req.sku, cancellation_id.len());
    Json(Order {
        order_no: 2,
        status: "cancelled",
    })
}

fn main() {
    let app = App {
        idem: Idem::new(idem::MemoryStore::new()),
    };
    let _router: Router = Router::new()
        .route("/payments", post(create_payment))
        .route("/orders", post(place_order))
        .route("/orders/{cancellation_id}/cancel", post(cancel_order))
        .with_state(app);
}
