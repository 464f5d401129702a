//! Runtime of [idem](https://docs.rs/idem): canonical request fingerprints, the claim/replay
//! engine and its stores.
//!
//! Applications depend on the `idem` facade crate, which re-exports this crate together with the
//! procedural macros; the paths documented there are the stable ones.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod canonical;
pub mod fingerprint;
pub mod store;

pub use canonical::{CanonicalError, Spec, ValueSpec};
pub use fingerprint::{Canonical, CanonicalWriter, Fingerprint, RequestHash};

/// Items used by the code that idem's macros generate. Not a public API: no semver guarantees.
#[doc(hidden)]
pub mod __private;
