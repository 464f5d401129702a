//! The header names idem reads and writes, the lists a browser's cross-origin requests need
//! allowed and exposed ([`CORS_ALLOW_HEADERS`], [`CORS_EXPOSE_HEADERS`]), and where a handler's
//! client key comes from ([`KeySource`]).

/// The request header of the client key (the IETF draft's and Stripe's name).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Set to `true` on every replayed response (Stripe's header; the draft names none).
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// Set to `unprotected` on a response of a `fail_open` handler that ran while the store was
/// unavailable.
pub const IDEMPOTENCY_STATUS: &str = "idempotency-status";
/// Set to `truncated` on a stored snapshot whose body was over the size limit and was replaced by
/// its business number (`{"<biz_no_field>": "<biz_no>"}`, S12).
pub const IDEMPOTENT_SNAPSHOT: &str = "idempotent-snapshot";

/// The request headers a browser's cross-origin write sends that CORS does not allow by itself:
/// the client key, and `content-type`, since `application/json` is not one of the values CORS
/// lets through without asking. A `POST` with either is preflighted (an `OPTIONS` request), and
/// the server's `Access-Control-Allow-Headers` must list both, or the browser sends nothing.
/// Scope headers of the application's own (a tenant id, say) go into the same answer.
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use idem_runtime::http::{CORS_ALLOW_HEADERS, IDEMPOTENCY_KEY};
/// assert!(CORS_ALLOW_HEADERS.contains(&IDEMPOTENCY_KEY));
/// // The value of `Access-Control-Allow-Headers`, for a server that writes it by hand:
/// assert_eq!(CORS_ALLOW_HEADERS.join(", "), "idempotency-key, content-type");
/// # }
/// ```
pub const CORS_ALLOW_HEADERS: [&str; 2] = [IDEMPOTENCY_KEY, "content-type"];

/// The response headers a browser's script reads from idem's answers, which CORS hides from a
/// cross-origin `fetch` unless the server lists them in `Access-Control-Expose-Headers`:
/// [`IDEMPOTENT_REPLAYED`], `retry-after` (on `409` and `503`: when to send the same request
/// again), [`IDEMPOTENCY_STATUS`], [`IDEMPOTENT_SNAPSHOT`], and `location`, which idem does not
/// set but replays: a replayed `201` carries the `Location` of the resource the first attempt
/// created, and CORS exposes `location` to no script by default. `content-type` is left out:
/// CORS exposes it always.
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use idem_runtime::http::{CORS_EXPOSE_HEADERS, IDEMPOTENT_REPLAYED};
/// assert!(CORS_EXPOSE_HEADERS.contains(&IDEMPOTENT_REPLAYED));
/// assert!(CORS_EXPOSE_HEADERS.contains(&"retry-after"));
/// // The value of `Access-Control-Expose-Headers`, for a server that writes it by hand:
/// assert_eq!(
///     CORS_EXPOSE_HEADERS.join(", "),
///     "idempotent-replayed, retry-after, idempotency-status, idempotent-snapshot, location"
/// );
/// # }
/// ```
pub const CORS_EXPOSE_HEADERS: [&str; 5] = [
    IDEMPOTENT_REPLAYED,
    "retry-after",
    IDEMPOTENCY_STATUS,
    IDEMPOTENT_SNAPSHOT,
    "location",
];

/// Where the client key comes from.
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use idem_runtime::http::KeySource;
/// let from_header = KeySource::Header("Idempotency-Key");
/// let order_id = String::from("order-7");
/// let from_body = KeySource::Value(&order_id);
/// # let _ = (from_header, from_body);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource<'a> {
    /// A request header (case-insensitive), parsed as an sf-string or a bare key
    /// ([`parse_header_key`](crate::key::parse_header_key)). Missing: `400 missing-key`.
    Header(&'static str),
    /// A value of the request itself (a path parameter, a body field), taken as it is
    /// ([`validate_key`](crate::key::validate_key)).
    Value(&'a str),
}
