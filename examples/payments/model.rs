//! The payments example's API without its HTTP framework: request and response types,
//! validation, problems and the operations, shared by the axum (`examples/payments.rs`) and the
//! actix-web (`examples/payments_actix.rs`) servers, which only map requests and responses.

use std::str::FromStr;

use idem::problem::Problem;
use idem::{AnySql, Fingerprint, Idem, Snapshot, Tx};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::Config;
use super::db::{Db, EventRow, PaymentRow, RefundRow, insert_payment, now_ms};

/// The application's state.
#[derive(Clone)]
pub struct App {
    /// The idempotency store and its policy.
    pub idem: Idem,
    /// The business tables.
    pub db: Db,
    /// Timing knobs.
    pub config: Config,
}

// ---------------------------------------------------------------- problems

/// The base of the service's problem types, idem's included (`Idem::with_problem_base`).
pub(crate) const PROBLEMS: &str = "https://payments.example/problems/";

fn problem(slug: &str, title: &str, status: u16, detail: impl Into<String>) -> Problem {
    Problem::new(&format!("{PROBLEMS}{slug}"), title, status, detail)
}

fn invalid(detail: impl Into<String>) -> Problem {
    problem("invalid-request", "Invalid request", 400, detail)
}

fn not_found(what: &str, id: &str) -> Problem {
    problem("not-found", "Not found", 404, format!("no {what} `{id}`"))
}

/// A database error: the client may retry with the same key after `Retry-After` (the record is
/// abandoned by the example's policy: the retry continues the same operation).
fn db_error(e: sqlx::Error) -> Problem {
    problem(
        "database-unavailable",
        "Database unavailable",
        503,
        format!("the payments database failed ({e}): retry with the same idempotency key"),
    )
    .extension("retry_after", 1)
}

/// `pay_`, `re_`, `evt_` + the operation id as a simple UUID: the id of the business row
/// is a function of the operation (S22), so a retry that takes over a stalled attempt writes the
/// same row, which the unique constraints refuse (S23).
fn business_id(prefix: &str) -> Result<(String, String), Problem> {
    let op = idem::operation_id()
        .ok_or_else(|| problem("internal", "Internal error", 500, "no operation id"))?;
    let op = op.to_string();
    Ok((format!("{prefix}_{}", op.replace('-', "")), op))
}

/// An amount as requests send it: a decimal string or a JSON number.
fn amount_in() -> utoipa::openapi::Schema {
    utoipa::openapi::schema::OneOfBuilder::new()
        .item(amount_out())
        .item(
            utoipa::openapi::ObjectBuilder::new()
                .schema_type(utoipa::openapi::Type::Number)
                .exclusive_minimum(Some(0.0)),
        )
        .examples(["100.00"])
        .build()
        .into()
}

/// An amount as answers give it: a decimal string with the scale it was sent with.
fn amount_out() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .pattern(Some(r"^[0-9]+(\.[0-9]+)?$"))
        .examples(["100.00"])
        .build()
}

fn amount_of(text: &str) -> Decimal {
    Decimal::from_str(text).unwrap_or_default()
}

// ---------------------------------------------------------------- payments

/// `POST /v1/payments`. The fingerprint is amount, currency, customer_id, order_id and metadata;
/// `100`, `"100"` and `100.00` are the same amount. `client_ip`, `timestamp` and `signature`
/// differ on every retry: accepted, never hashed (and unused here).
#[derive(Fingerprint, Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct CreatePayment {
    /// Greater than zero; a decimal string or a JSON number (`"100.00"`, `100`: one amount).
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    #[schema(schema_with = amount_in)]
    pub amount: Decimal,
    /// An ISO 4217 code; `XXX` simulates a processor failure (`500`, stored and replayed).
    #[schema(example = "EUR", pattern = "^[A-Z]{3}$")]
    pub currency: String,
    #[schema(example = "cus_1")]
    pub customer_id: String,
    #[schema(example = "ord_42")]
    pub order_id: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// Not part of the request's identity: a retry may send another.
    #[fingerprint(env)]
    #[serde(default)]
    pub client_ip: Option<String>,
    /// Not part of the request's identity: a retry may send another.
    #[fingerprint(env)]
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub timestamp: Option<Value>,
    /// Not part of the request's identity: a retry may send another.
    #[fingerprint(env)]
    #[serde(default)]
    pub signature: Option<String>,
}

/// A payment; `amount` is a decimal string with the scale it was sent with (`"100.00"`).
#[derive(Snapshot, Serialize, ToSchema)]
pub struct Payment {
    #[snapshot(biz_no)]
    #[schema(example = "pay_0193c1d2e3f47a8b9c0d1e2f3a4b5c6d")]
    pub payment_id: String,
    #[snapshot(key)]
    #[schema(value_type = String, example = "succeeded")]
    pub status: &'static str,
    #[snapshot(key)]
    #[schema(schema_with = amount_out)]
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

/// Creates a payment in `tx` (idem's atomic mode: committed with the stored response, or
/// neither).
pub async fn create_payment(
    app: &App,
    tx: &mut Tx<AnySql>,
    req: CreatePayment,
) -> Result<Payment, Problem> {
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
            500,
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
    let row = insert_payment(tx, &row).await.map_err(db_error)?;
    Ok(Payment::from(row))
}

/// The `Location` of a payment.
pub fn location(payment: &Payment) -> String {
    format!("/v1/payments/{}", payment.payment_id)
}

/// `GET /v1/payments/{id}`.
pub async fn get_payment(app: &App, id: &str) -> Result<Payment, Problem> {
    match app.db.payment(id).await.map_err(db_error)? {
        Some(row) => Ok(row.into()),
        None => Err(not_found("payment", id)),
    }
}

// ---------------------------------------------------------------- refunds

/// `POST /v1/payments/{id}/refunds`.
#[derive(Fingerprint, Deserialize, ToSchema)]
pub struct CreateRefund {
    /// Greater than zero and at most the payment's amount; a decimal string or a JSON number.
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    #[schema(schema_with = amount_in)]
    pub amount: Decimal,
}

/// A refund: `pending` for `PAYMENTS_SETTLE_MS` after its creation, then `succeeded`.
#[derive(Snapshot, Serialize, ToSchema)]
pub struct Refund {
    #[snapshot(biz_no)]
    pub refund_id: String,
    pub payment_id: String,
    #[schema(schema_with = amount_out)]
    pub amount: Decimal,
    /// `pending`, then `succeeded`.
    #[schema(value_type = String, example = "pending")]
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

/// A refund's current state (`GET /v1/refunds/{id}`, and the `latest_state` replays).
pub async fn find_refund(app: App, id: String) -> Result<Refund, Problem> {
    match app.db.refund(&id).await.map_err(db_error)? {
        Some(row) => Ok(Refund::of(row, &app.config)),
        None => Err(not_found("refund", &id)),
    }
}

/// Creates a refund of `payment_id` (two commits: the unique constraint on the operation id
/// keeps a retried operation's row single).
pub async fn create_refund(
    app: &App,
    payment_id: String,
    req: CreateRefund,
) -> Result<Refund, Problem> {
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
    Ok(Refund::of(row, &app.config))
}

// ---------------------------------------------------------------- events

/// `POST /v1/events`.
#[derive(Fingerprint, Deserialize, ToSchema)]
pub struct TrackEvent {
    #[schema(example = "checkout.viewed")]
    pub name: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<Map<String, Value>>,
}

/// An accepted event.
#[derive(Snapshot, Serialize, ToSchema)]
pub struct Event {
    #[snapshot(biz_no)]
    pub event_id: String,
}

/// Records an event.
pub async fn track_event(app: &App, req: TrackEvent) -> Result<Event, Problem> {
    let (event_id, operation_id) = business_id("evt")?;
    let row = EventRow {
        event_id,
        operation_id,
        name: req.name,
        properties: req.properties.map(|p| Value::Object(p).to_string()),
    };
    let row = app.db.insert_event(&row).await.map_err(db_error)?;
    Ok(Event {
        event_id: row.event_id,
    })
}

// ---------------------------------------------------------------- stats

/// `GET /v1/stats`: rows in the business tables.
#[derive(Serialize, ToSchema)]
pub struct Stats {
    pub payments: i64,
    pub refunds: i64,
    pub events: i64,
}

/// Counts the business rows.
pub async fn stats(app: &App) -> Result<Stats, Problem> {
    let c = app.db.counts().await.map_err(db_error)?;
    Ok(Stats {
        payments: c.payments,
        refunds: c.refunds,
        events: c.events,
    })
}
