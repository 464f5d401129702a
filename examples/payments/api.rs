//! The axum API of the payments example: the handlers over `model.rs`.

use axum::extract::{FromRef, Path, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderName, StatusCode};
use idem::axum::Json;
use idem::problem::Problem;
use idem::{AnySql, Idem, Tx, idempotent};

use super::model::{
    self, App, CreatePayment, CreateRefund, Event, Payment, Refund, Stats, TrackEvent,
};
use super::openapi::{
    Counted, CreatedPayment, CreatedRefund, FoundPayment, FoundRefund, ScopeHeaders, TrackedEvent,
};

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

type Created<T> = Result<(StatusCode, [(HeaderName, String); 1], Json<T>), Problem>;

/// `POST /v1/payments`, in idem's atomic mode (`transaction = tx`): the payment row is written
/// in `tx`, and idem commits it together with the stored response, or neither.
#[utoipa::path(
    post,
    path = "/v1/payments",
    summary = "Create a payment",
    description = "Charges once per key: a retry with the same key and request gets the first answer again.",
    tag = "payments",
    params(ScopeHeaders),
    request_body = CreatePayment,
    responses(CreatedPayment)
)]
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
    let payment = model::create_payment(&app, &mut tx, req).await?;
    let location = model::location(&payment);
    Ok((StatusCode::CREATED, [(LOCATION, location)], Json(payment)))
}

/// `GET /v1/payments/{id}`.
#[utoipa::path(
    get,
    path = "/v1/payments/{id}",
    summary = "Read a payment",
    tag = "payments",
    params(("id" = String, Path, description = "The payment's id.")),
    responses(FoundPayment)
)]
pub async fn get_payment(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Payment>, Problem> {
    model::get_payment(&app, &id).await.map(Json)
}

async fn find_refund(app: App, id: String) -> Result<Json<Refund>, Problem> {
    model::find_refund(app, id).await.map(Json)
}

/// `POST /v1/payments/{id}/refunds`. The payment id is part of the scope: the same key on two
/// payments names two refunds.
#[utoipa::path(
    post,
    path = "/v1/payments/{id}/refunds",
    summary = "Refund a payment",
    description = "Refunds once per key and payment: a retry answers the refund's current state.",
    tag = "refunds",
    params(("id" = String, Path, description = "The payment's id."), ScopeHeaders),
    request_body = CreateRefund,
    responses(CreatedRefund)
)]
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
    let refund = model::create_refund(&app, payment_id, req).await?;
    Ok((StatusCode::CREATED, Json(refund)))
}

/// `GET /v1/refunds/{id}`.
#[utoipa::path(
    get,
    path = "/v1/refunds/{id}",
    summary = "Read a refund",
    tag = "refunds",
    params(("id" = String, Path, description = "The refund's id.")),
    responses(FoundRefund)
)]
pub async fn get_refund(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Refund>, Problem> {
    find_refund(app, id).await
}

/// `POST /v1/events`. A duplicate is suppressed: `200 {"event_id": ..}`, nothing recorded.
#[utoipa::path(
    post,
    path = "/v1/events",
    summary = "Track an event",
    description = "Records an event once per key: a duplicate is suppressed.",
    tag = "events",
    params(ScopeHeaders),
    request_body = TrackEvent,
    responses(TrackedEvent)
)]
#[idempotent(
    scope = [header("X-Tenant-Id"), header("X-User-Id")],
    contract = "suppress_only",
    ttl = "6h"
)]
pub async fn track_event(
    State(app): State<App>,
    Json(req): Json<TrackEvent>,
) -> Result<(StatusCode, Json<Event>), Problem> {
    let event = model::track_event(&app, req).await?;
    Ok((StatusCode::ACCEPTED, Json(event)))
}

/// `GET /v1/stats`: rows in the business tables.
#[utoipa::path(
    get,
    path = "/v1/stats",
    summary = "Count the business rows",
    tag = "operations",
    responses(Counted)
)]
pub async fn stats(State(app): State<App>) -> Result<Json<Stats>, Problem> {
    model::stats(&app).await.map(Json)
}
