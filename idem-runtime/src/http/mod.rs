//! What the HTTP fronts ([`axum`](crate::axum) and [`actix`](crate::actix)) share and no
//! framework decides: the header names (and those a browser's cross-origin requests need
//! allowed and exposed), where a handler's key comes from ([`KeySource`]), the
//! body limit of the middlewares, the request head a key is read and scoped from
//! (`RequestHead`), the rules of a snapshot (which response headers are stored, the business
//! number a store can keep, a body over the size limit), and the exact replay of a stored
//! record.
//!
//! The rule: nothing here names axum or actix-web; a front converts its framework's request and
//! response to and from these types.

use crate::engine::problem::{INVALID_BODY, Problem};

mod head;
mod headers;
pub(crate) mod layer;
pub(crate) mod replay;
pub(crate) mod snapshot;

#[cfg(feature = "openapi")]
pub(crate) use head::display_header_name;
pub(crate) use head::{RequestHead, header_key};
pub use headers::{
    CORS_ALLOW_HEADERS, CORS_EXPOSE_HEADERS, IDEMPOTENCY_KEY, IDEMPOTENCY_STATUS,
    IDEMPOTENT_REPLAYED, IDEMPOTENT_SNAPSHOT, KeySource,
};

/// Default largest request body the middlewares read (the tower `IdempotencyLayer`, the actix
/// `Idempotency`): 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// The problem of a request body its JSON extractor refused (`status` 400, 413 or 415): nothing
/// ran, so the same key may be sent again with a corrected body.
pub(crate) fn invalid_body(status: u16, detail: &str, base: Option<&str>) -> Problem {
    let title = match status {
        415 => "Request body is not JSON",
        413 => "Request body too large",
        _ => "Invalid request body",
    };
    let detail = format!(
        "{detail}: fix the body and send it again (the same idempotency key may be reused: nothing was executed)"
    );
    Problem::new(INVALID_BODY, title, status, detail).rebase_onto(base)
}
