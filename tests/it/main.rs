//! The integration tests of the facade crate, in one binary (one link of sqlx, axum and tokio
//! instead of one per file): one module per subject, sharing the helpers of `tests/common/`.
//!
//! Tests of several modules run at the same time against the same database servers: each
//! works in names of its own (`servers::unique`), never on the whole table. The tests that stop
//! or stall the servers, or want the whole machine, live in `tests/faults/`, a binary that cargo
//! runs alone.
//!
//! One module: `cargo test --all-features --test it hostile::` (a test name filter).

#[cfg(feature = "actix")]
mod actix;
mod atomic;
#[cfg(feature = "cli")]
mod cli;
mod contention;
mod dashboard;
mod derive;
mod derive_prost;
mod encryption;
mod engine_lease;
mod engine_once;
mod equivalence;
#[cfg(feature = "tonic")]
mod grpc;
mod hostile;
mod http_engine;
mod http_layer;
mod idempotent_axum;
mod idempotent_consumer;
mod model;
#[cfg(feature = "utoipa")]
mod openapi;
mod payments;
mod recorder;
#[cfg(feature = "cli")]
mod rekey;
mod remember;
mod replay_cache;
mod snapshot;
mod vectors;
mod vectors_derive;
mod wait;

// `backends()` serves tests/faults only.
#[allow(dead_code)]
#[path = "../common/backends.rs"]
mod backends;
#[path = "../common/counted.rs"]
mod counted;
#[path = "../common/records.rs"]
mod records;
// `sh` and `Restart` serve tests/faults and idem-runtime's outage tests only.
#[allow(dead_code)]
#[path = "../common/servers.rs"]
mod servers;
#[path = "../common/sql_pool.rs"]
mod sql_pool;
