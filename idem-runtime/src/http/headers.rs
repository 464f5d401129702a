//! The header names idem reads and writes, and where a handler's client key comes from
//! ([`KeySource`]).

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
