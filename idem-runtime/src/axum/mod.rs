//! The axum front of the engine (feature `axum`): what `#[idempotent]` generates for an axum
//! handler (its [`IdemContext`] extractor; the body it generates calls the
//! engine through `__private`, not a public API: the attribute is), problem+json responses, a
//! JSON extractor whose rejections are `400` ([`Json`]), and the tower [`IdempotencyLayer`] for
//! handlers that are not annotated.
//!
//! The header names and what the two HTTP fronts share are in [`http`](crate::http); the
//! status codes and problem types are documented in `docs/http.md`.

mod body;
pub(crate) mod context;
mod json;
mod layer;
mod respond;
pub(crate) mod run;
mod snapshot;

pub use context::IdemContext;
pub use json::{Json, JsonRejection};
pub use layer::{Idempotency, IdempotencyLayer, ResponseFuture};
pub use snapshot::{IntoSnapshot, SnapshotBody};
