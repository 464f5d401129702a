//! The actix-web API of the payments example: the handlers over `model.rs`, serving exactly
//! what the axum handlers of `api.rs` serve.

use actix_web::http::StatusCode;
use actix_web::http::header::LOCATION;
use actix_web::web;
use idem::actix::idempotent;
use idem::problem::Problem;
use idem::{AnySql, Tx};

use super::model::{
    self, App, CreatePayment, CreateRefund, Event, Payment, Refund, Stats, TrackEvent,
};
use super::openapi::{
    Counted, CreatedPayment, CreatedRefund, FoundPayment, FoundRefund, ScopeHeaders, TrackedEvent,
};

/// The routes, for `App::configure`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/payments", web::post().to(create_payment))
        .route("/v1/payments/{id}", web::get().to(get_payment))
        .route("/v1/payments/{id}/refunds", web::post().to(create_refund))
        .route("/v1/refunds/{id}", web::get().to(get_refund))
        .route("/v1/events", web::post().to(track_event))
        .route("/v1/stats", web::get().to(stats));
}

type Created<T> = Result<
    (
        web::Json<T>,
        StatusCode,
        [(actix_web::http::header::HeaderName, String); 1],
    ),
    Problem,
>;

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
async fn create_payment(
    app: web::Data<App>,
    mut tx: Tx<AnySql>,
    req: web::Json<CreatePayment>,
) -> Created<Payment> {
    let payment = model::create_payment(&app, &mut tx, req.into_inner()).await?;
    let location = model::location(&payment);
    Ok((
        web::Json(payment),
        StatusCode::CREATED,
        [(LOCATION, location)],
    ))
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
async fn get_payment(
    app: web::Data<App>,
    id: web::Path<String>,
) -> Result<web::Json<Payment>, Problem> {
    model::get_payment(&app, &id).await.map(web::Json)
}

async fn find_refund(app: App, id: String) -> Result<web::Json<Refund>, Problem> {
    model::find_refund(app, id).await.map(web::Json)
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
        let app = App::clone(&app);
        move |refund_id| find_refund(app, refund_id)
    },
    ttl = "90d"
)]
async fn create_refund(
    app: web::Data<App>,
    payment_id: web::Path<String>,
    req: web::Json<CreateRefund>,
) -> Result<(web::Json<Refund>, StatusCode), Problem> {
    let refund = model::create_refund(&app, payment_id.into_inner(), req.into_inner()).await?;
    Ok((web::Json(refund), StatusCode::CREATED))
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
async fn get_refund(
    app: web::Data<App>,
    id: web::Path<String>,
) -> Result<web::Json<Refund>, Problem> {
    find_refund(App::clone(&app), id.into_inner()).await
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
async fn track_event(
    app: web::Data<App>,
    req: web::Json<TrackEvent>,
) -> Result<(web::Json<Event>, StatusCode), Problem> {
    let event = model::track_event(&app, req.into_inner()).await?;
    Ok((web::Json(event), StatusCode::ACCEPTED))
}

/// `GET /v1/stats`: rows in the business tables.
#[utoipa::path(
    get,
    path = "/v1/stats",
    summary = "Count the business rows",
    tag = "operations",
    responses(Counted)
)]
async fn stats(app: web::Data<App>) -> Result<web::Json<Stats>, Problem> {
    model::stats(&app).await.map(web::Json)
}
