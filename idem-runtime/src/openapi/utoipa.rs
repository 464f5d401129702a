//! The utoipa adapter (feature `utoipa`).

use serde_json::Value;

use super::layer::describe_layer_paths;
use super::{
    HandlerDoc, LayerDoc, describe_document, describe_registered, handlers, warn_ambiguous,
};

/// A `utoipa::Modify` that describes a utoipa document's idempotent operations:
/// `use idem::openapi::Idempotency;` then `#[openapi(paths(..), modifiers(&Idempotency))]`.
/// Operations are matched to the registered [`handlers`](super::handlers) by `operationId`, which utoipa sets to
/// the function's name.
///
/// Routes behind the tower layer or the actix-web middleware: [`Idempotency::layer`].
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Idempotency;

impl Idempotency {
    /// `Idempotency`, for those who prefer a constructor: `Idempotency::new().layer(..)`.
    ///
    /// ```
    /// use idem_runtime::openapi::Idempotency;
    /// let _ = Idempotency::new();
    /// ```
    pub const fn new() -> Self {
        Idempotency
    }

    /// Describes also the unsafe methods (`POST`, `PUT`, `PATCH`, `DELETE`, ...) at `paths`,
    /// the routes behind `layer` (the tower `IdempotencyLayer` or the actix-web `Idempotency`
    /// middleware, or its [`LayerDoc`]), as [`describe_paths`](super::describe_paths) does: the router, not the
    /// middleware, knows which routes it wraps. Paths are written as in the document
    /// (`/v1/refunds/{id}`); a path the document does not have is logged (a warning).
    ///
    /// utoipa's `modifiers(&..)` takes only a name, and the middleware is built at run time:
    /// apply the result to the document with `utoipa::Modify::modify`.
    ///
    /// ```
    /// # #[cfg(feature = "axum")] {
    /// use idem_runtime::axum::IdempotencyLayer;
    /// use idem_runtime::engine::Idem;
    /// use idem_runtime::json::Spec;
    /// use idem_runtime::openapi::Idempotency;
    /// use utoipa::{Modify, OpenApi};
    ///
    /// #[utoipa::path(post, path = "/v1/refunds", responses((status = 201, description = "Created")))]
    /// async fn refund() {}
    ///
    /// #[derive(OpenApi)]
    /// #[openapi(paths(refund))]
    /// struct ApiDoc;
    ///
    /// let layer = IdempotencyLayer::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new())
    ///     .header("X-Request-Id")
    ///     .global();
    /// let mut openapi = ApiDoc::openapi();
    /// Idempotency::new().layer(&layer, ["/v1/refunds"]).modify(&mut openapi);
    ///
    /// let document = serde_json::to_value(&openapi).unwrap();
    /// let refund = &document["paths"]["/v1/refunds"]["post"];
    /// assert_eq!(refund["parameters"][0]["name"], "X-Request-Id");
    /// assert_eq!(refund["x-idempotency"]["scope"], serde_json::json!([]));
    /// # }
    /// ```
    pub fn layer<P: Into<String>>(
        self,
        layer: impl Into<LayerDoc>,
        paths: impl IntoIterator<Item = P>,
    ) -> IdempotencyWith {
        IdempotencyWith::default().layer(layer, paths)
    }

    /// Describes only the handlers of `module` and its submodules (`module_path!()` of where
    /// they are written, `"my_app::api"`): for a program with handlers of one name in two
    /// APIs, or a document of one of its APIs. Without it every registered handler may match.
    ///
    /// ```
    /// use idem_runtime::openapi::Idempotency;
    /// let modifier = Idempotency.within(concat!(module_path!(), "::api"));
    /// # let _ = modifier;
    /// ```
    pub fn within(self, module: impl Into<String>) -> IdempotencyWith {
        IdempotencyWith::default().within(module)
    }
}

impl ::utoipa::Modify for Idempotency {
    fn modify(&self, openapi: &mut ::utoipa::openapi::OpenApi) {
        modify_as_json(openapi, describe_registered);
    }
}

/// A `utoipa::Modify` that describes the registered handlers, as [`Idempotency`] does, and the
/// routes behind middlewares: made by [`Idempotency::layer`], one more middleware with each
/// [`layer`](IdempotencyWith::layer).
///
/// ```
/// # #[cfg(all(feature = "axum", feature = "actix"))] {
/// use idem_runtime::engine::Idem;
/// use idem_runtime::json::Spec;
/// use idem_runtime::openapi::Idempotency;
///
/// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
/// let refunds = idem_runtime::axum::IdempotencyLayer::new(idem.clone(), Spec::new()).global();
/// let payouts = idem_runtime::axum::IdempotencyLayer::new(idem, Spec::new())
///     .header("X-Payout-Key")
///     .global();
/// let modifier = Idempotency
///     .layer(&refunds, ["/v1/refunds", "/v1/refunds/{id}/cancel"])
///     .layer(&payouts, ["/v1/payouts"]);
/// # let _ = modifier;
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
#[derive(Debug, Clone, Default)]
pub struct IdempotencyWith {
    layers: Vec<(LayerDoc, Vec<String>)>,
    /// The modules whose handlers are described; empty: every module.
    modules: Vec<String>,
}

impl IdempotencyWith {
    /// Describes also the unsafe methods at `paths`, the routes behind `layer`
    /// ([`Idempotency::layer`]).
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::Contract;
    /// use idem_runtime::openapi::{Idempotency, LayerDoc};
    ///
    /// let doc = |header: &str| LayerDoc {
    ///     contract: Contract::ExactReplay,
    ///     ttl: Duration::from_secs(86_400),
    ///     remember: None,
    ///     header: header.into(),
    ///     scope: vec!["default".into()],
    /// };
    /// let modifier = Idempotency
    ///     .layer(doc("Idempotency-Key"), ["/v1/refunds"])
    ///     .layer(doc("X-Payout-Key"), ["/v1/payouts"]);
    /// # let _ = modifier;
    /// ```
    #[must_use]
    pub fn layer<P: Into<String>>(
        mut self,
        layer: impl Into<LayerDoc>,
        paths: impl IntoIterator<Item = P>,
    ) -> Self {
        let paths = paths.into_iter().map(Into::into).collect();
        self.layers.push((layer.into(), paths));
        self
    }

    /// Describes the handlers of `module` (and its submodules) too, and no others unless named
    /// by another `within` ([`Idempotency::within`]).
    #[must_use]
    pub fn within(mut self, module: impl Into<String>) -> Self {
        self.modules.push(module.into());
        self
    }

    /// The registered handlers this modifier describes.
    fn handlers(&self) -> Vec<&'static HandlerDoc> {
        let inside = |module: &str| {
            self.modules.is_empty()
                || self.modules.iter().any(|m| {
                    module
                        .strip_prefix(m.as_str())
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
                })
        };
        handlers()
            .into_iter()
            .filter(|h| inside(h.module))
            .collect()
    }
}

impl ::utoipa::Modify for IdempotencyWith {
    fn modify(&self, openapi: &mut ::utoipa::openapi::OpenApi) {
        modify_as_json(openapi, |document| {
            warn_ambiguous(describe_document(document, &self.handlers()));
            for (layer, paths) in &self.layers {
                describe_layer_paths(document, layer, paths);
            }
        });
    }
}

/// Applies `describe` to `openapi` as JSON; on an error, logs it and leaves `openapi` as it was.
fn modify_as_json(openapi: &mut ::utoipa::openapi::OpenApi, describe: impl FnOnce(&mut Value)) {
    let mut document = match serde_json::to_value(&*openapi) {
        Ok(document) => document,
        Err(e) => {
            tracing::error!(target: "idem", "the OpenAPI document does not serialize: {e}");
            return;
        }
    };
    describe(&mut document);
    match serde_json::from_value(document) {
        Ok(described) => *openapi = described,
        Err(e) => tracing::error!(
            target: "idem",
            "the described OpenAPI document does not read back: {e}; left as it was"
        ),
    }
}
