//! # idem
//!
//! Idempotent API write endpoints for Rust, the way payment companies build them.
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idem_macros::Fingerprint;
pub use idem_runtime::{
    Canonical, CanonicalError, CanonicalWriter, Fingerprint, RequestHash, Spec, ValueSpec,
    canonical, fingerprint,
};

#[doc(hidden)]
pub use idem_runtime::__private;
