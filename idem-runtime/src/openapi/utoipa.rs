//! The utoipa adapter (feature `utoipa`).

use super::describe_registered;

/// A `utoipa::Modify` that describes a utoipa document's idempotent operations:
/// `use idem::openapi::Idempotency;` then `#[openapi(paths(..), modifiers(&Idempotency))]`.
/// Operations are matched to the registered [`handlers`](super::handlers) by `operationId`, which utoipa sets to
/// the function's name.
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Idempotency;

impl ::utoipa::Modify for Idempotency {
    fn modify(&self, openapi: &mut ::utoipa::openapi::OpenApi) {
        let mut document = match serde_json::to_value(&*openapi) {
            Ok(document) => document,
            Err(e) => {
                tracing::error!(target: "idem", "the OpenAPI document does not serialize: {e}");
                return;
            }
        };
        describe_registered(&mut document);
        match serde_json::from_value(document) {
            Ok(described) => *openapi = described,
            Err(e) => tracing::error!(
                target: "idem",
                "the described OpenAPI document does not read back: {e}; left as it was"
            ),
        }
    }
}
