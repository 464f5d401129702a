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

pub use idem_runtime::store;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use idem_runtime::store::MySqlStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use idem_runtime::store::PostgresStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use idem_runtime::store::SqliteStore;
pub use idem_runtime::store::{
    Claim, ClaimRequest, Clock, Completion, KeyError, Lease, ManualClock, MemoryStore, Outcome,
    Record, RecordState, ScopedKey, Store, StoreError, Sweeper, SystemClock, Timestamp,
};

#[doc(hidden)]
pub use idem_runtime::__private;
