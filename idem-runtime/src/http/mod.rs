//! The HTTP front of the engine (feature `axum`): what `#[idempotent]` generates for an axum
//! handler (its [`IdemContext`] extractor and [`KeySource`]; the body it generates calls the
//! engine through `__private`, not a public API: the attribute is), problem+json responses, a
//! JSON extractor whose rejections are `400` ([`Json`]), and the tower [`IdempotencyLayer`] for
//! handlers that are not annotated.
//!
//! The status codes and problem types are documented in `docs/http.md`.

mod body;
mod context;
mod json;
mod layer;
mod respond;
pub(crate) mod run;
mod snapshot;

pub use context::{IdemContext, KeySource};
pub use json::{Json, JsonRejection};
pub use layer::{DEFAULT_BODY_LIMIT, Idempotency, IdempotencyLayer, ResponseFuture};
pub use snapshot::{IntoSnapshot, SnapshotBody};

pub use crate::engine::Snapshot;

/// The problem base of the handle ([`Idem::with_problem_base`](crate::engine::Idem::with_problem_base))
/// that guards a request, in its extensions, so that [`Json`]'s rejections use it too.
#[derive(Debug, Clone)]
pub(crate) struct ProblemBase(pub(crate) std::sync::Arc<str>);

impl ProblemBase {
    /// Puts `idem`'s problem base, if it has one, into `extensions`.
    pub(crate) fn insert(idem: &crate::engine::Idem, extensions: &mut http::Extensions) {
        if let Some(base) = idem.problem_base() {
            extensions.insert(ProblemBase(base.clone()));
        }
    }
}
pub use crate::engine::problem::Problem;

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
