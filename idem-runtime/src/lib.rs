//! Runtime of [idem](https://docs.rs/idem): canonical request fingerprints, the claim/replay
//! engine ([`engine`], framework-free), its stores, and one front per framework, each named
//! after its feature: [`axum`] (axum handlers, the tower layer), [`actix`] (actix-web handlers
//! and middleware) and [`tonic`] (gRPC methods). [`http`] is what the two HTTP fronts share:
//! header names, problem+json, snapshots.
//!
//! Applications depend on the `idem` facade crate, which re-exports this crate together with the
//! procedural macros; the paths documented there are the stable ones.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "actix")]
#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
pub mod actix;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;
#[cfg(feature = "decimal")]
#[cfg_attr(docsrs, doc(cfg(feature = "decimal")))]
pub mod deserialize;
mod encode;
pub mod engine;
pub mod fingerprint;
#[cfg(any(feature = "axum", feature = "actix"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "axum", feature = "actix"))))]
pub mod http;
pub mod json;
pub mod key;
#[cfg(feature = "openapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
pub mod openapi;
pub mod seal;
pub mod store;
pub(crate) mod telemetry;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod tonic;

pub use engine::{
    AsIdem, Contract, HandlerConfig, Idem, IdempotencyError, OperationId, Snapshot, operation_id,
    run_once,
};
pub use fingerprint::{Canonical, CanonicalWriter, Fingerprint, RequestHash};
pub use json::{CanonicalError, Spec, ValueSpec};
pub use key::ScopePart;

/// Items used by the code that idem's macros generate. Not a public API: no semver guarantees.
#[doc(hidden)]
pub mod __private;

/// Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`). Not a public API: no semver
/// guarantees.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz;
