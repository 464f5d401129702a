//! What both HTTP servers of the example (axum's `examples/payments.rs`, actix-web's
//! `examples/payments_actix.rs`) put around the API and the gRPC server does not: the headers a
//! browser's cross-origin calls may send and read (CORS, for the origins of
//! `PAYMENTS_CORS_ORIGINS`).
//!
//! The rule: the lists come from `idem::http`, plus the example's own scope headers; each
//! server only hands them to its framework's CORS middleware.

use idem::http::CORS_ALLOW_HEADERS;

pub use idem::http::CORS_EXPOSE_HEADERS;

/// The headers that scope the example's keys (`X-Tenant-Id`, `X-User-Id`).
const SCOPE_HEADERS: [&str; 2] = ["x-tenant-id", "x-user-id"];

/// The request headers a browser's script may send: idem's (`Idempotency-Key`, `Content-Type`)
/// and the scope headers.
pub fn allowed_headers() -> impl Iterator<Item = &'static str> {
    CORS_ALLOW_HEADERS.into_iter().chain(SCOPE_HEADERS)
}
