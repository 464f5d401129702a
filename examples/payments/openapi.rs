//! The payments API's description, `GET /openapi.json` (built with `--features utoipa`): what
//! the axum and the actix-web servers share — the title, the tags, the scope headers, the
//! answers of each operation — and idem's part, added by `idem::openapi::Idempotency` from the
//! `#[idempotent]` attributes: the `Idempotency-Key` parameter, the `409`/`422` problems,
//! `Retry-After`, `Idempotent-Replayed` and `x-idempotency`.
//!
//! The rule: each handler carries its `#[utoipa::path]` (the route, the request, the answers
//! below) beside its `#[idempotent]`; nothing of idem's is written here by hand.

#![allow(dead_code)] // The types below only describe; nothing constructs them.

use utoipa::{IntoParams, IntoResponses, ToSchema};

use super::model::{Event, Payment, Refund, Stats};

/// What both servers' documents share.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "payments",
        version = "1",
        description = "A payments API whose write endpoints are idempotent: send an \
            `Idempotency-Key` with each POST, and the same key with the same request on every \
            retry of it. Amounts are decimal strings."
    ),
    tags(
        (name = "payments", description = "Payments, created once per key (`exact_replay`)."),
        (name = "refunds", description = "Refunds; a retry answers the current state (`latest_state`)."),
        (name = "events", description = "Events; a duplicate is suppressed (`suppress_only`)."),
        (name = "operations", description = "The process: counts, metrics, this description."),
    ),
    components(schemas(Payment, Refund, Event, Stats, Problem, OpenApiDocument))
)]
struct Shared;

/// The document of `paths` (a server's `#[derive(OpenApi)]` of its handlers, written in
/// `module`) as JSON: the shared parts, then what idem adds to the `#[idempotent]` operations
/// of `module`. `None` without `--features utoipa`: a description without idem's part would
/// hide the key.
pub fn json(paths: utoipa::openapi::OpenApi, module: &str) -> Option<String> {
    #[cfg(not(feature = "utoipa"))]
    {
        let _ = (paths, module);
        None
    }
    #[cfg(feature = "utoipa")]
    {
        use utoipa::Modify;

        let mut document = <Shared as utoipa::OpenApi>::openapi().merge_from(paths);
        // The handlers of this server only: a program may link other handlers of these names
        // (the tests link both servers, and handlers of their own named `create_payment`).
        idem::openapi::Idempotency
            .within(module)
            .modify(&mut document);
        Some(
            document
                .to_pretty_json()
                .expect("an OpenAPI document serializes"),
        )
    }
}

/// A problem document (RFC 9457): every error answer of the API, idem's included.
#[derive(ToSchema)]
pub struct Problem {
    /// `https://payments.example/problems/` + `invalid-request`, `not-found`,
    /// `processor-failure`, `database-unavailable`, `key-reused`, `in-progress`, ...
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    /// What happened and what to do.
    pub detail: Option<String>,
    /// Seconds to wait before a retry with the same key (`409`, `503`).
    pub retry_after: Option<u64>,
    /// The request's key, on idem's problems.
    pub idempotency_key: Option<String>,
}

/// The headers that scope the keys: the same key under two tenants (or users) names two
/// operations.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct ScopeHeaders {
    /// The tenant; absent is a tenant of its own.
    #[param(rename = "X-Tenant-Id")]
    pub tenant: Option<String>,
    /// The user; absent is a user of its own.
    #[param(rename = "X-User-Id")]
    pub user: Option<String>,
}

/// The answers of `POST /v1/payments`.
#[derive(IntoResponses)]
pub enum CreatedPayment {
    /// The payment. A retry with the same key and request gets this answer again, byte for
    /// byte, with `Idempotent-Replayed: true`.
    #[response(
        status = 201,
        headers(("Location" = String, description = "The payment's URL: `/v1/payments/{id}`."))
    )]
    Created(Payment),
    /// The request is invalid (`amount` not above zero, `currency` not three capital letters):
    /// not stored, the corrected request may reuse the key.
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// The processor refused the payment (`"currency": "XXX"`): stored and replayed to every
    /// retry with this key.
    #[response(status = 500, content_type = "application/problem+json")]
    Failed(Problem),
    /// The database is unavailable: retry with the same key after `Retry-After`.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// The answers of `POST /v1/payments/{id}/refunds`.
#[derive(IntoResponses)]
pub enum CreatedRefund {
    /// The refund, `pending` until it settles.
    #[response(status = 201)]
    Created(Refund),
    /// A retry with the same key and request: the refund's current state, `succeeded` once
    /// it settled, with `Idempotent-Replayed: true`.
    #[response(status = 200)]
    Current(Refund),
    /// The amount is not above zero or exceeds the payment's: not stored.
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// No such payment.
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
    /// The database is unavailable: retry with the same key after `Retry-After`.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// The answers of `POST /v1/events`.
#[derive(IntoResponses)]
pub enum TrackedEvent {
    /// The event is recorded.
    #[response(status = 202)]
    Accepted(Event),
    /// A duplicate (same key, same event): suppressed, nothing recorded; the first event's id.
    #[response(status = 200)]
    Duplicate(Event),
    /// The database is unavailable: retry with the same key after `Retry-After`.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// The answers of `GET /v1/payments/{id}`.
#[derive(IntoResponses)]
pub enum FoundPayment {
    /// The payment.
    #[response(status = 200)]
    Found(Payment),
    /// No such payment.
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
}

/// The answers of `GET /v1/refunds/{id}`.
#[derive(IntoResponses)]
pub enum FoundRefund {
    /// The refund's current state.
    #[response(status = 200)]
    Found(Refund),
    /// No such refund.
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
}

/// The answers of `GET /v1/stats`.
#[derive(IntoResponses)]
pub enum Counted {
    /// Rows in the business tables.
    #[response(status = 200)]
    Counts(Stats),
    /// The database is unavailable.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// The answer of `GET /metrics`.
#[derive(IntoResponses)]
pub enum Metrics {
    /// The process's series in Prometheus' text format: idem's and
    /// `payments_http_requests_total`.
    #[response(status = 200, content_type = "text/plain; version=0.0.4")]
    Text(String),
}

/// The answer of `GET /openapi.json`.
#[derive(IntoResponses)]
pub enum Description {
    /// This document (OpenAPI 3.1).
    #[response(status = 200, content_type = "application/json")]
    Document(OpenApiDocument),
}

/// An OpenAPI 3.1 document.
#[derive(ToSchema)]
#[schema(value_type = Object)]
pub struct OpenApiDocument(serde_json::Value);
