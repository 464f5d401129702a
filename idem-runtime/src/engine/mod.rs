//! The framework-free claim/replay engine behind every front: the axum and actix-web handlers and
//! the tonic methods `#[idempotent]` generates, the tower and actix middlewares, and [`run_once`]
//! for queue consumers and other plain `async fn`s. A request's key is validated and scoped, its fingerprint taken before the
//! handler runs, and the key claimed in the [`Store`]: a fresh claim runs the handler under a
//! lease, a completed record of the same request is replayed, another request's is `422`, a live
//! lease `409` + `Retry-After`, an unreachable store `503` + `Retry-After`.
//!
//! The rule: once the handler has started, its record is never deleted and its operation id never
//! changes until a result is stored or the TTL ends, except when the [`OutcomePolicy`] declares
//! the outcome effect-free. An attempt that ends without a result abandons the record, and the
//! retry continues the same operation under the same [`operation_id`]. The handler may run more
//! than once after a crash or a cancellation, never under two operation ids. `docs/storage.md`
//! ("Failure points") says what a retry sees after a failure at each step.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use core::time::Duration;
//! use idem_runtime::engine::{Contract, HandlerConfig, Idem, IdempotencyError, run_once};
//! use idem_runtime::RequestHash;
//! use idem_runtime::store::MemoryStore;
//!
//! static CONFIG: HandlerConfig = HandlerConfig::new("billing::charge")
//!     .ttl(Duration::from_secs(86_400))
//!     .contract(Contract::ExactReplay);
//!
//! #[derive(Debug, serde::Serialize, serde::Deserialize)]
//! enum ChargeError { Declined, Idempotency(String) }
//! impl From<IdempotencyError> for ChargeError {
//!     fn from(e: IdempotencyError) -> Self { ChargeError::Idempotency(e.to_string()) }
//! }
//!
//! let idem = Idem::new(MemoryStore::new());
//! let hash = RequestHash::of_bytes(br#"{"amount":100}"#);
//! let mut runs = 0;
//! for _ in 0..3 {
//!     let charged: Result<String, ChargeError> =
//!         run_once(&idem, &CONFIG, "msg-42", &[&"acme"], hash, async {
//!             runs += 1;
//!             Ok("ch_1".to_owned())
//!         })
//!         .await;
//!     assert_eq!(charged.unwrap(), "ch_1");
//! }
//! assert_eq!(runs, 1); // the two redeliveries replayed the stored result
//! # });
//! ```
//!
//! [`Store`]: crate::store::Store

mod attempt;
// What every front of generated code takes (axum's, actix-web's, tonic's).
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) mod call;
mod contract;
mod error;
mod flow;
mod front;
mod handle;
mod handler_config;
mod once;
mod operation;
mod policy;
pub mod problem;
mod replay_cache;
mod snapshot;
mod wait;

pub use contract::Contract;
pub use error::{Expired, IdempotencyError};
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) use flow::{RequestKey, execute};
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) use front::{ClaimSettings, Front, Settlement};
pub use handle::{AsIdem, Idem};
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) use handle::{ScopeTaker, default_scope_parts};
pub use handler_config::{DEFAULT_LEASE, DEFAULT_TTL, HandlerConfig, default_timeout};
pub use once::run_once;
pub use operation::{OperationId, operation_id};
pub use policy::{DefaultPolicy, Disposition, OutcomePolicy};
pub use replay_cache::{
    DEFAULT_REPLAY_CACHE_CLOCK_MARGIN, DEFAULT_REPLAY_CACHE_MAX_AGE, ReplayCache,
};
pub use snapshot::Snapshot;
#[cfg(any(feature = "axum", feature = "actix"))]
pub(crate) use snapshot::{biz_no_body, key_fields_body};
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) use snapshot::{never_stored, storable};

#[cfg(test)]
mod tests;
