//! The header names idem reads and writes.

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
