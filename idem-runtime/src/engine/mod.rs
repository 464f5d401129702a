//! The framework-free claim/replay engine shared by every front: the axum handlers
//! (what `#[idempotent]` generates), the tower
//! `http::IdempotencyLayer`, and [`run_once`] for queue consumers and other plain `async fn`s.
//!
//! One request goes through the same steps whatever the front:
//!
//! 1. the client key is validated ([`parse_header_key`]) and scoped ([`ScopePart`]s: tenant,
//!    user, ...; [`HandlerConfig::operation`]) into a [`ScopedKey`];
//! 2. the request was fingerprinted **before** the handler runs (a [`RequestHash`]);
//! 3. the key is claimed in the [`Store`]: a fresh claim runs the handler, with the stable
//!    [`operation_id`] readable inside it (S22) and its lease extended in the background while it
//!    runs; a completed record with the same request hash is replayed, with another hash it is
//!    `422` (S7); a live lease is `409` + `Retry-After` (S8); an unreachable store is `503` +
//!    `Retry-After` and the handler does not run (unless [`HandlerConfig::fail_open`]);
//! 4. the response is classified by an [`OutcomePolicy`] ([`DefaultPolicy`]): stored for replay,
//!    stored as a terminal failure, released so that a corrected retry runs as a new operation
//!    (S2: only for outcomes that guarantee the operation never started), or abandoned;
//! 5. once the handler has started, its record is never deleted and its operation id never
//!    changes until a result is stored or the TTL ends: an attempt that ends without a result
//!    (the request future dropped because the client went away, a panic, the handler's timeout,
//!    a failed response body) **abandons** the record — it keeps its operation id and its lease
//!    ends at once — so the next retry takes it over immediately and continues the same
//!    operation, which effects keyed on the operation id deduplicate (S22).
//!
//! What this promises is one stored result per key and one operation id per operation, not that
//! the handler body runs at most once: after a crash, a cancellation or a timeout the handler
//! may run again, always under the same operation id. `docs/storage.md` ("Failure points") says
//! what a retry sees after a failure at each step.
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
//! [`ScopedKey`]: crate::key::ScopedKey
//! [`parse_header_key`]: crate::key::parse_header_key
//! [`ScopePart`]: crate::key::ScopePart
//! [`Store`]: crate::store::Store
//! [`RequestHash`]: crate::RequestHash

mod attempt;
// What every front of generated code takes; the axum front is the only one so far.
#[cfg(feature = "axum")]
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

pub use contract::Contract;
pub use error::IdempotencyError;
#[cfg(feature = "axum")]
pub(crate) use flow::execute;
#[cfg(feature = "axum")]
pub(crate) use front::{ClaimSettings, Front, Settlement};
pub use handle::{AsIdem, DEFAULT_MAX_SNAPSHOT_BYTES, DEFAULT_STORE_TIMEOUT, Idem};
pub use handler_config::{DEFAULT_LEASE, DEFAULT_TTL, HandlerConfig, default_timeout};
pub use once::run_once;
pub use operation::{OperationId, operation_id};
pub use policy::{DefaultPolicy, Disposition, OutcomePolicy};
pub use replay_cache::{
    DEFAULT_REPLAY_CACHE_CLOCK_MARGIN, DEFAULT_REPLAY_CACHE_MAX_AGE, ReplayCache,
};
pub use snapshot::Snapshot;
#[cfg(feature = "axum")]
pub(crate) use snapshot::{biz_no_body, key_fields_body};

#[cfg(test)]
mod tests;
