//! The aide adapter (feature `aide`): an aide `ApiRouter` documents `#[idempotent]` axum
//! handlers from their extractors, and [`idempotency`] completes the document.
//!
//! aide builds an operation's description from its handler's argument types
//! (`aide::OperationInput`), before the route's transform declares the answers. The context
//! `#[idempotent]` adds to an axum handler names the handler, so its description adds what
//! the attribute says: the key's header parameter, `x-idempotency` and `x-fern-idempotent`. The
//! answers come last, when the document is finished: [`idempotency`], given to
//! `ApiRouter::finish_api_with`, adds to every operation so marked the `400`, `409`, `422` and
//! `503` problem answers (`Retry-After` on `409` and `503`), `Idempotent-Replayed` on every
//! `2xx` the route declared, and the [`IdempotencyProblem`](super::PROBLEM_SCHEMA) schema.
//!
//! The handler's other arguments need descriptions too: [`IdemContext`] has an empty one (it is
//! no part of the API), and [`Json<T>`](crate::axum::Json) documents its body as aide's own
//! `Json` does (`T: schemars::JsonSchema`, schemars 0.9).
//!
//! ```
//! use aide::axum::ApiRouter;
//! use aide::axum::routing::post_with;
//! use aide::openapi::OpenApi;
//! use idem_runtime::axum::{IdemContext, Json};
//! use idem_runtime::engine::Idem;
//! use idem_runtime::openapi::aide::idempotency;
//!
//! // `#[idempotent]` adds the context to a handler; a handler may take it by itself too.
//! async fn create(_cx: IdemContext, Json(amount): Json<u64>) -> Json<u64> {
//!     Json(amount)
//! }
//!
//! let mut api = OpenApi::default();
//! let app: axum::Router = ApiRouter::new()
//!     .api_route("/orders", post_with(create, |op| op.response::<201, Json<u64>>()))
//!     .finish_api_with(&mut api, idempotency)
//!     .with_state(Idem::new(idem_runtime::store::MemoryStore::new()));
//! # let _ = app;
//! let doc = serde_json::to_value(&api).unwrap();
//! let op = &doc["paths"]["/orders"]["post"];
//! assert_eq!(op["requestBody"]["content"]["application/json"]["schema"]["type"], "integer");
//! assert!(op["responses"]["201"].is_object());
//! // Not `#[idempotent]`: nothing added.
//! assert!(op.get("x-idempotency").is_none());
//! ```

use ::aide::generate::GenContext;
use ::aide::openapi::{Operation, Response};
use ::aide::transform::TransformOpenApi;
use ::aide::{OperationInput, OperationOutput};
use serde_json::Value;

use super::layer::describe_layer_paths;
use super::{HandlerDoc, LayerDoc, describe_marked, handlers};
use crate::axum::context::{HandlerContext, handler_id};
use crate::axum::{IdemContext, Json};

/// Completes an aide document with the answers of its `#[idempotent]` operations: give it to
/// `ApiRouter::finish_api_with`, or call it last in the transform given there.
///
/// An operation is idempotent when its handler's context marked it (`x-idempotency`); it gains
/// the `400`, `409`, `422` and `503` answers as `application/problem+json` with the shared
/// [`IdempotencyProblem`](super::PROBLEM_SCHEMA) schema, `Retry-After` on `409` and `503`, and
/// `Idempotent-Replayed` on every `2xx` answer the route declared. Answers the route declared
/// for the same statuses are kept, and gain idem's content and headers. Other operations are
/// untouched.
///
/// ```
/// use aide::openapi::OpenApi;
/// use aide::transform::TransformOpenApi;
/// use idem_runtime::openapi::aide::idempotency;
///
/// // What an `#[idempotent]` handler's route looks like before the document is finished.
/// let document = serde_json::json!({
///     "openapi": "3.1.0",
///     "info": { "title": "orders", "version": "1" },
///     "paths": { "/orders": { "post": {
///         "x-idempotency": { "contract": "exact_replay", "ttl": "P1D" },
///         "responses": { "201": { "description": "Created" } },
///     } } },
/// });
/// // aide reads an `OpenApi` from text only.
/// let mut api: OpenApi = serde_json::from_str(&document.to_string()).unwrap();
/// // In an application: `router.finish_api_with(&mut api, idempotency)`, or
/// // `|api| api.title("Orders").with(idempotency)`.
/// let _ = idempotency(TransformOpenApi::new(&mut api));
///
/// let doc = serde_json::to_value(&api).unwrap();
/// let responses = &doc["paths"]["/orders"]["post"]["responses"];
/// assert!(responses["201"]["headers"]["Idempotent-Replayed"].is_object());
/// assert!(responses["409"]["headers"]["Retry-After"].is_object());
/// assert!(doc["components"]["schemas"]["IdempotencyProblem"].is_object());
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "aide")))]
pub fn idempotency(api: TransformOpenApi<'_>) -> TransformOpenApi<'_> {
    on_json(api, describe_marked)
}

/// Describes the routes behind a middleware (the tower `IdempotencyLayer` or the actix-web
/// `Idempotency`, or its [`LayerDoc`]) at `paths`, as
/// [`describe_paths`](super::describe_paths) does: their unsafe methods gain the key's
/// parameter, the problem answers, the replay header, `x-idempotency` and
/// `x-fern-idempotent`. The router, not the middleware, knows which routes it wraps: name
/// their paths as the document writes them; a path the document lacks is logged. Give it to
/// the transform of `finish_api_with`, beside [`idempotency`]:
/// `|api| api.with(idempotency).with(layer(&refunds, ["/v1/refunds"]))`.
///
/// ```
/// use core::time::Duration;
/// use aide::openapi::OpenApi;
/// use aide::transform::TransformOpenApi;
/// use idem_runtime::engine::Contract;
/// use idem_runtime::openapi::LayerDoc;
/// use idem_runtime::openapi::aide::layer;
///
/// let document = serde_json::json!({
///     "openapi": "3.1.0",
///     "info": { "title": "refunds", "version": "1" },
///     "paths": { "/v1/refunds": {
///         "get": { "responses": { "200": { "description": "The refunds" } } },
///         "post": { "responses": { "201": { "description": "Created" } } },
///     } },
/// });
/// let mut api: OpenApi = serde_json::from_str(&document.to_string()).unwrap();
/// let refunds = LayerDoc {
///     contract: Contract::ExactReplay,
///     ttl: Duration::from_secs(86_400),
///     remember: None,
///     header: "Idempotency-Key".into(),
///     scope: vec!["default".into()],
/// };
/// let _ = TransformOpenApi::new(&mut api).with(layer(refunds, ["/v1/refunds"]));
///
/// let doc = serde_json::to_value(&api).unwrap();
/// let refunds = &doc["paths"]["/v1/refunds"];
/// assert_eq!(refunds["post"]["parameters"][0]["name"], "Idempotency-Key");
/// assert!(refunds["post"]["responses"]["409"]["headers"]["Retry-After"].is_object());
/// assert!(refunds["post"]["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
/// assert_eq!(refunds["post"]["x-idempotency"]["scope"], serde_json::json!(["default"]));
/// assert!(refunds["get"].get("x-idempotency").is_none());
/// assert!(doc["components"]["schemas"]["IdempotencyProblem"].is_object());
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "aide")))]
pub fn layer<P: Into<String>>(
    layer: impl Into<LayerDoc>,
    paths: impl IntoIterator<Item = P>,
) -> impl for<'a> FnOnce(TransformOpenApi<'a>) -> TransformOpenApi<'a> {
    let layer = layer.into();
    let paths: Vec<String> = paths.into_iter().map(Into::into).collect();
    transform(move |api| {
        on_json(api, |document| {
            describe_layer_paths(document, &layer, &paths);
        })
    })
}

/// `f`, with the signature of a transform for any document's lifetime.
fn transform<F>(f: F) -> F
where
    F: for<'a> FnOnce(TransformOpenApi<'a>) -> TransformOpenApi<'a>,
{
    f
}

/// Applies `describe` to the paths and the components of `api`'s document as JSON (aide reads
/// its whole `OpenApi` back from borrowed text alone); on an error, logs it and leaves the
/// document as it was.
fn on_json<'a>(
    mut api: TransformOpenApi<'a>,
    describe: impl FnOnce(&mut Value),
) -> TransformOpenApi<'a> {
    let openapi = api.inner_mut();
    let (Some(paths), Some(components)) = (to_json(&openapi.paths), to_json(&openapi.components))
    else {
        return api;
    };
    let mut document = serde_json::json!({ "paths": paths, "components": components });
    describe(&mut document);
    if let (Some(paths), Some(components)) = (
        from_json(document["paths"].take(), "paths"),
        from_json(document["components"].take(), "components"),
    ) {
        openapi.paths = paths;
        openapi.components = components;
    }
    api
}

/// No part of the API: an extractor of idem's.
impl OperationInput for IdemContext {}

/// The context `#[idempotent]` adds: the handler's key parameter, `x-idempotency` and
/// `x-fern-idempotent` (the answers are [`idempotency`]'s).
impl<const HANDLER: u64> OperationInput for HandlerContext<HANDLER> {
    fn operation_input(_ctx: &mut GenContext, operation: &mut Operation) {
        let Some(doc) = handler(HANDLER) else {
            return;
        };
        let Some(mut value) = to_json(&*operation) else {
            return;
        };
        doc.mark(&mut value);
        if let Some(described) = from_json(value, "operation") {
            *operation = described;
        }
    }
}

/// The request body, as aide's `axum::Json<T>` documents it.
impl<T> OperationInput for Json<T>
where
    ::axum::Json<T>: OperationInput,
{
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        <::axum::Json<T> as OperationInput>::operation_input(ctx, operation);
    }
}

/// The response body, as aide's `axum::Json<T>` documents it; inferred as the `200` answer
/// (not with axum's `422` rejections: this `Json` rejects with `400`).
impl<T> OperationOutput for Json<T>
where
    ::axum::Json<T>: OperationOutput,
{
    type Inner = <::axum::Json<T> as OperationOutput>::Inner;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        <::axum::Json<T> as OperationOutput>::operation_response(ctx, operation)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<u16>, Response)> {
        Self::operation_response(ctx, operation)
            .map(|response| vec![(Some(200), response)])
            .unwrap_or_default()
    }
}

/// The registered description of the handler `id` names; `None`, with a warning, when two
/// handlers of one module share a name and differ.
fn handler(id: u64) -> Option<&'static HandlerDoc> {
    let found: Vec<&HandlerDoc> = handlers()
        .into_iter()
        .filter(|h| handler_id(h.module, h.function) == id)
        .collect();
    let first = *found.first()?;
    if found.iter().all(|h| *h == first) {
        return Some(first);
    }
    tracing::warn!(
        target: "idem",
        function = first.function,
        module = first.module,
        "two #[idempotent] handlers of one module are named `{}`: their operations are not \
         described; rename one",
        first.function,
    );
    None
}

fn to_json<T: serde::Serialize>(value: &T) -> Option<Value> {
    serde_json::to_value(value)
        .inspect_err(|e| {
            tracing::error!(target: "idem", "the OpenAPI description does not serialize: {e}");
        })
        .ok()
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value, what: &str) -> Option<T> {
    serde_json::from_value(value)
        .inspect_err(|e| {
            tracing::error!(
                target: "idem",
                "the described OpenAPI {what} does not read back: {e}; left as it was"
            );
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::aide::openapi::OpenApi;

    #[test]
    fn a_marked_operation_reads_back_as_aide_s() {
        let doc = HandlerDoc {
            function: "create",
            module: "api",
            operation: None,
            contract: crate::engine::Contract::ExactReplay,
            ttl: core::time::Duration::from_secs(60),
            remember: None,
            key: super::super::KeyDoc::Header("Idempotency-Key"),
            scope: &[],
        };
        let mut value = to_json(&Operation::default()).unwrap();
        doc.mark(&mut value);
        let operation: Operation = from_json(value.clone(), "operation").unwrap();
        let mut back = to_json(&operation).unwrap();
        // aide writes a header parameter's default style.
        assert_eq!(back["parameters"][0]["style"], "simple");
        back["parameters"][0]
            .as_object_mut()
            .unwrap()
            .remove("style");
        assert_eq!(back, value);

        let mut api = OpenApi::default();
        let mut paths = ::aide::openapi::Paths::default();
        let item = ::aide::openapi::PathItem {
            post: Some(operation),
            ..Default::default()
        };
        paths
            .paths
            .insert("/orders".into(), ::aide::openapi::ReferenceOr::Item(item));
        api.paths = Some(paths);
        let _ = idempotency(TransformOpenApi::new(&mut api));
        let described = to_json(&api).unwrap();
        let op = &described["paths"]["/orders"]["post"];
        assert!(op["responses"]["422"].is_object(), "{op}");
        assert!(described["components"]["schemas"][super::super::PROBLEM_SCHEMA].is_object());
    }
}
