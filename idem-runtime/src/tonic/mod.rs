//! The gRPC front of the engine (feature `tonic`): what `#[idempotent]` generates for the unary
//! methods of a tonic service (the [`GrpcContext`] it builds from the request, and the run
//! function it calls through `__private`, not a public API: the attribute is), and the mapping
//! of every idempotency condition to a gRPC status with `google.rpc` details ([`status`]).
//!
//! The key is the request metadata `idempotency-key` (the same rules as the HTTP header: 1 to
//! 255 characters, an sf-string or a bare key); a replay carries the metadata
//! `idempotent-replayed: true`. The status codes, their details and the reasoning behind them
//! are documented in `docs/grpc.md`.

mod context;
pub(crate) mod run;
mod snapshot;
mod status;

pub use context::{GrpcContext, KeySource};
pub use snapshot::GrpcMessage;
pub use status::{ERROR_DOMAIN, code_of_status, http_status_of_code, status};

/// The request metadata that carries the client's key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The response metadata set on every replay, of a message or of a status: `true`.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// The response metadata set when the handler ran without protection (the store was
/// unavailable and the method fails open): `unprotected`.
pub const IDEMPOTENCY_STATUS: &str = "idempotency-status";
