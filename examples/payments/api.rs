//! The HTTP API of the payments example: request and response types, and the handlers.

use std::str::FromStr;

use axum::extract::{FromRef, Path, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderName, StatusCode};
use idem::http::Json;
use idem::problem::Problem;
use idem::{AnySql, Fingerprint, Idem, Snapshot, Tx, idempotent};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Config;
use super::db::{Db, EventRow, PaymentRow, RefundRow, insert_payment, now_ms};

/// The router's state.
#[derive(Clone)]
pub struct App {
    /// The idempotency store and its policy.
    pub idem: Idem,
    /// The business tables.
    pub db: Db,
    /// Timing knobs.
    pub config: Config,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

// ---------------------------------------------------------------- problems

/// The base of the service's problem types, idem's included (`Idem::with_problem_base`).
pub(crate) const PROBLEMS: &str = "https://payments.example/problems/";

fn problem(slug: &str, title: &str, status: StatusCode, detail: impl Into<String>) -> Problem {
    Problem::new(&format!("{PROBLEMS}{slug}"), title, status.as_u16(), detail)
}

fn invalid(detail: impl Into<String>) -> Problem {
    problem(
        "invalid-request",
        "Invalid request",
        StatusCode::BAD_REQUEST,
        detail,
    )
}

fn not_found(what: &str, id: &str) -> Problem {
    problem(
        "not-found",
        "Not found",
        StatusCode::NOT_FOUND,
        format!("no {what} `{id}`"),
    )
}

/// A database error: the client may retry with the same key after `Retry-After` (the record is
/// abandoned by the example's policy: the retry continues the same operation).
fn db_error(e: sqlx::Error) -> Problem {
    problem(
        "database-unavailable",
        "Database unavailable",
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the payments database failed ({e}): retry with the same idempotency key"),
    )
    .extension("retry_after", 1)
}

/// `pay_`, `re_`, `evt_` + the operation id as a simple UUID: the id of the business row
/// is a function of the operation (S22), so a retry that takes over a stalled attempt writes the
/// same row, which the unique constraints refuse (S23).
fn business_id(prefix: &str) -> Result<(String, String), Problem> {
    let op = idem::operation_id().ok_or_else(|| {
        problem(
            "internal",
            "Internal error",
            StatusCode::INTERNAL_SERVER_ERROR,
            "no operation id",
        )
    })?;
    let op = op.to_string();
    Ok((format!("{prefix}_{}", op.replace('-', "")), op))
}

fn amount_of(text: &str) -> Decimal {
    Decimal::from_str(text).unwrap_or_default()
}

// ---------------------------------------------------------------- payments

/// `POST /v1/payments`. The fingerprint is amount, currency, customer_id, order_id and metadata;
/// `100`, `"100"` and `100.00` are the same amount. `client_ip`, `timestamp` and `signature`
/// differ on every retry: accepted, never hashed (and unused here).
#[derive(Fingerprint, Deserialize)]
#[allow(dead_code)]
pub struct CreatePayment {
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    pub amount: Decimal,
    pub currency: String,
    pub customer_id: String,
    pub order_id: String,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[fingerprint(env)]
    #[serde(default)]
    pub client_ip: Option<String>,
    #[fingerprint(env)]
    #[serde(default)]
    pub timestamp: Option<Value>,
    #[fingerprint(env)]
    #[serde(default)]
    pub signature: Option<String>,
}

/// A payment; `amount` is a decimal string with the scale it was sent with (`"100.00"`).
#[derive(Snapshot, Serialize)]
pub struct Payment {
    #[snapshot(biz_no)]
    pub payment_id: String,
    #[snapshot(key)]
    pub status: &'static str,
    #[snapshot(key)]
    pub amount: Decimal,
    #[snapshot(key)]
    pub currency: String,
    pub customer_id: String,
    pub order_id: String,
}

impl From<PaymentRow> for Payment {
    fn from(row: PaymentRow) -> Self {
        Payment {
            amount: amount_of(&row.amount),
            payment_id: row.payment_id,
            status: "succeeded",
            currency: row.currency,
            customer_id: row.customer_id,
            order_id: row.order_id,
        }
    }
}

type Created<T> = Result<(StatusCode, [(HeaderName, String); 1], Json<T>), Problem>;

/// `POST /v1/payments`, in idem's atomic mode (`transaction = tx`): the payment row is written
/// in `tx`, and idem commits it together with the stored response, or neither.
#[idempotent(
    scope = [header("X-Tenant-Id"), header("X-User-Id")],
    contract = "exact_replay",
    ttl = "90d",
    lease = "10s",
    transaction = tx
)]
pub async fn create_payment(
    State(app): State<App>,
    mut tx: Tx<AnySql>,
    Json(req): Json<CreatePayment>,
) -> Created<Payment> {
    if req.amount <= Decimal::ZERO {
        return Err(invalid("`amount` must be greater than zero"));
    }
    if req.currency.len() != 3 || !req.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(invalid(
            "`currency` must be an ISO 4217 code: three capital letters",
        ));
    }
    // The processing time of a real processor call (`PAYMENTS_DELAY_MS`).
    if !app.config.delay.is_zero() {
        tokio::time::sleep(app.config.delay).await;
    }
    if req.currency == "XXX" {
        // A 500 is the handler's own answer: stored and replayed under exact_replay.
        return Err(problem(
            "processor-failure",
            "Payment processor failure",
            StatusCode::INTERNAL_SERVER_ERROR,
            "the processor declined to answer for currency XXX (simulated failure)",
        ));
    }
    let (payment_id, operation_id) = business_id("pay")?;
    let row = PaymentRow {
        payment_id,
        operation_id,
        amount: req.amount.to_string(),
        currency: req.currency,
        customer_id: req.customer_id,
        order_id: req.order_id,
        metadata: req.metadata.map(|m| Value::Object(m).to_string()),
        created_at: now_ms(),
    };
    let row = insert_payment(&mut tx, &row).await.map_err(db_error)?;
    let location = format!("/v1/payments/{}", row.payment_id);
    Ok((
        StatusCode::CREATED,
        [(LOCATION, location)],
        Json(Payment::from(row)),
    ))
}

/// `GET /v1/payments/{id}`.
pub async fn get_payment(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Payment>, Problem> {
    match app.db.payment(&id).await.map_err(db_error)? {
        Some(row) => Ok(Json(row.into())),
        None => Err(not_found("payment", &id)),
    }
}

// ---------------------------------------------------------------- refunds

/// `POST /v1/payments/{id}/refunds`.
#[derive(Fingerprint, Deserialize)]
pub struct CreateRefund {
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    pub amount: Decimal,
}

/// A refund: `pending` for `PAYMENTS_SETTLE_MS` after its creation, then `succeeded`.
#[derive(Snapshot, Serialize)]
pub struct Refund {
    #[snapshot(biz_no)]
    pub refund_id: String,
    pub payment_id: String,
    pub amount: Decimal,
    pub status: &'static str,
}

impl Refund {
    fn of(row: RefundRow, config: &Config) -> Self {
        let settled = now_ms().saturating_sub(row.created_at_ms) >= config.settle_ms();
        Refund {
            refund_id: row.refund_id,
            payment_id: row.payment_id,
            amount: amount_of(&row.amount),
            status: if settled { "succeeded" } else { "pending" },
        }
    }
}

async fn find_refund(app: App, id: String) -> Result<Json<Refund>, Problem> {
    match app.db.refund(&id).await.map_err(db_error)? {
        Some(row) => Ok(Json(Refund::of(row, &app.config))),
        None => Err(not_found("refund", &id)),
    }
}

/// The payment id is part of the scope: the same key on two payments names two refunds.
#[idempotent(
    scope = [header("X-Tenant-Id"), header("X-User-Id"), payment_id],
    contract = "latest_state",
    lookup = {
        let app = app.clone();
        move |refund_id| find_refund(app, refund_id)
    },
    ttl = "90d"
)]
pub async fn create_refund(
    State(app): State<App>,
    Path(payment_id): Path<String>,
    Json(req): Json<CreateRefund>,
) -> Result<(StatusCode, Json<Refund>), Problem> {
    let payment = app
        .db
        .payment(&payment_id)
        .await
        .map_err(db_error)?
        .ok_or_else(|| not_found("payment", &payment_id))?;
    if req.amount <= Decimal::ZERO {
        return Err(invalid("`amount` must be greater than zero"));
    }
    if req.amount > amount_of(&payment.amount) {
        return Err(invalid(format!(
            "`amount` exceeds the payment's amount ({})",
            payment.amount
        )));
    }
    let (refund_id, operation_id) = business_id("re")?;
    let row = RefundRow {
        refund_id,
        operation_id,
        payment_id,
        amount: req.amount.to_string(),
        created_at_ms: now_ms(),
    };
    let row = app.db.insert_refund(&row).await.map_err(db_error)?;
    Ok((StatusCode::CREATED, Json(Refund::of(row, &app.config))))
}

/// `GET /v1/refunds/{id}`.
pub async fn get_refund(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Refund>, Problem> {
    find_refund(app, id).await
}

// ---------------------------------------------------------------- events

/// `POST /v1/events`.
#[derive(Fingerprint, Deserialize)]
pub struct TrackEvent {
    pub name: String,
    #[serde(default)]
    pub properties: Option<Map<String, Value>>,
}

/// An accepted event.
#[derive(Snapshot, Serialize)]
pub struct Event {
    #[snapshot(biz_no)]
    pub event_id: String,
}

/// A duplicate is suppressed: `200 {"event_id": ..}`, nothing recorded.
#[idempotent(
    scope = [header("X-Tenant-Id"), header("X-User-Id")],
    contract = "suppress_only",
    ttl = "6h"
)]
pub async fn track_event(
    State(app): State<App>,
    Json(req): Json<TrackEvent>,
) -> Result<(StatusCode, Json<Event>), Problem> {
    let (event_id, operation_id) = business_id("evt")?;
    let row = EventRow {
        event_id,
        operation_id,
        name: req.name,
        properties: req.properties.map(|p| Value::Object(p).to_string()),
    };
    let row = app.db.insert_event(&row).await.map_err(db_error)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Event {
            event_id: row.event_id,
        }),
    ))
}

// ---------------------------------------------------------------- stats

/// `GET /v1/stats`: rows in the business tables.
#[derive(Serialize)]
pub struct Stats {
    pub payments: i64,
    pub refunds: i64,
    pub events: i64,
}

pub async fn stats(State(app): State<App>) -> Result<Json<Stats>, Problem> {
    let c = app.db.counts().await.map_err(db_error)?;
    Ok(Json(Stats {
        payments: c.payments,
        refunds: c.refunds,
        events: c.events,
    }))
}
