//! The routes behind the tower `IdempotencyLayer` and the actix-web `Idempotency` middleware:
//! the middleware describes itself ([`LayerDoc`]); the router, not the middleware, knows which
//! routes it covers, so the user names their paths ([`describe_paths`]).

use core::time::Duration;

use serde_json::Value;

use super::{Facts, add_problem_schema};
use crate::engine::Contract;

/// A middleware (the tower `IdempotencyLayer`, the actix-web `Idempotency`) as the API
/// description of its routes needs it; made by the middleware's `doc()`.
///
/// Its strings are owned: a middleware is configured at run time, where a [`HandlerDoc`](super::HandlerDoc)
/// is written once per handler by `#[idempotent]`.
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use core::time::Duration;
/// use idem_runtime::axum::IdempotencyLayer;
/// use idem_runtime::engine::{Contract, HandlerConfig, Idem};
/// use idem_runtime::openapi::LayerDoc;
/// use idem_runtime::json::Spec;
///
/// let layer = IdempotencyLayer::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new())
///     .header("X-Request-Id")
///     .config(HandlerConfig::for_route().contract(Contract::SuppressOnly).ttl(Duration::from_secs(86_400)))
///     .global();
/// assert_eq!(layer.doc(), LayerDoc {
///     contract: Contract::SuppressOnly,
///     ttl: Duration::from_secs(86_400),
///     remember: None,
///     header: "X-Request-Id".into(),
///     scope: vec![],
/// });
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDoc {
    /// The replay contract as callers see it: `exact_replay` for a middleware configured with
    /// `latest_state`, which it replays exactly (it has no lookup).
    pub contract: Contract,
    /// How long a key is remembered.
    pub ttl: Duration,
    /// How long, from the claim, the key is remembered past the TTL (`remember`), if at all.
    pub remember: Option<Duration>,
    /// The request header carrying the key (`Idempotency-Key` by default).
    pub header: String,
    /// The scope parts: those named with `scope_named`, `["scope(..)"]` for a scope function
    /// without names, `["default"]` for the handle's default scope, empty for `global()`.
    pub scope: Vec<String>,
}

impl LayerDoc {
    /// The `x-idempotency` member of the middleware's operations.
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::Contract;
    /// use idem_runtime::openapi::LayerDoc;
    ///
    /// let doc = LayerDoc {
    ///     contract: Contract::ExactReplay,
    ///     ttl: Duration::from_secs(7 * 86_400),
    ///     remember: None,
    ///     header: "Idempotency-Key".into(),
    ///     scope: vec!["default".into()],
    /// };
    /// assert_eq!(
    ///     doc.extension(),
    ///     serde_json::json!({
    ///         "contract": "exact_replay",
    ///         "ttl": "P7D",
    ///         "ttl_seconds": 604800,
    ///         "key": { "in": "header", "name": "Idempotency-Key" },
    ///         "scope": ["default"],
    ///     }),
    /// );
    /// ```
    pub fn extension(&self) -> Value {
        self.facts().extension()
    }

    /// Adds the middleware's idempotency to `operation`, an OpenAPI 3 Operation object: the
    /// same parts as [`HandlerDoc::describe`](super::HandlerDoc::describe) (key parameter,
    /// problem answers, replay header, `x-idempotency`, `x-fern-idempotent`). The answers refer
    /// to [`PROBLEM_SCHEMA`](super::PROBLEM_SCHEMA): [`describe_paths`] adds the schema.
    ///
    /// ```
    /// # use core::time::Duration;
    /// # use idem_runtime::engine::Contract;
    /// # use idem_runtime::openapi::LayerDoc;
    /// # let doc = LayerDoc { contract: Contract::ExactReplay, ttl: Duration::from_secs(86_400), remember: None,
    /// #     header: "X-Request-Id".into(), scope: vec![] };
    /// let mut operation = serde_json::json!({ "responses": { "200": { "description": "OK" } } });
    /// doc.describe(&mut operation);
    /// assert_eq!(operation["parameters"][0]["name"], "X-Request-Id");
    /// assert!(operation["responses"]["200"]["headers"]["Idempotent-Replayed"].is_object());
    /// assert!(operation["responses"]["503"]["headers"]["Retry-After"].is_object());
    /// ```
    pub fn describe(&self, operation: &mut Value) {
        self.facts().describe(operation);
    }

    fn facts(&self) -> Facts<'_> {
        Facts {
            contract: self.contract,
            ttl: self.ttl,
            remember: self.remember,
            header: Some(&self.header),
            scope: self.scope.iter().map(String::as_str).collect(),
        }
    }
}

/// [`describe_paths`], logging (a warning) each named path the document lacks: what the
/// adapters do.
#[cfg(any(feature = "utoipa", feature = "aide"))]
pub(crate) fn describe_layer_paths<P: AsRef<str>>(
    document: &mut Value,
    layer: &LayerDoc,
    paths: impl IntoIterator<Item = P>,
) {
    for path in describe_paths(document, layer, paths) {
        tracing::warn!(
            target: "idem",
            path = %path,
            "the OpenAPI document has no path `{path}`: the idempotency of the middleware's \
             routes there is not described"
        );
    }
}

/// Describes, with `layer`, the operations of `document` (an OpenAPI 3 document as JSON) that
/// the middleware makes idempotent at `paths`: every method but `GET`, `HEAD`, `OPTIONS` and
/// `TRACE` — `post`, `put`, `patch`, `delete`, OpenAPI 3.2's `query` and its
/// `additionalOperations` —, as the middleware does. Other methods, and paths not named, are
/// untouched. Adds [`problem_schema`](super::problem_schema) to the components when an
/// operation was described. Returns the paths named that match none of the document's.
///
/// A path is written as in the document (`/v1/refunds/{id}`) or as in the router: axum 0.7's
/// `/v1/refunds/:id` and `*rest` match too, and a parameter matches whatever its name (one path
/// has one shape). `/t` and `/t/` stay two paths, as they are to routers.
///
/// ```
/// # use core::time::Duration;
/// # use idem_runtime::engine::Contract;
/// use idem_runtime::openapi::{LayerDoc, describe_paths};
/// # let layer = LayerDoc { contract: Contract::ExactReplay, ttl: Duration::from_secs(86_400), remember: None,
/// #     header: "Idempotency-Key".into(), scope: vec!["default".into()] };
/// let mut document = serde_json::json!({
///     "openapi": "3.1.0",
///     "paths": {
///         "/v1/refunds/{refund_id}": {
///             "get": { "responses": {} },
///             "delete": { "responses": {} },
///         },
///         "/v1/charges": { "post": { "responses": {} } },
///     },
/// });
/// let missing = describe_paths(&mut document, &layer, ["/v1/refunds/:id", "/v1/payouts"]);
/// assert_eq!(missing, ["/v1/payouts"]);
/// let paths = &document["paths"];
/// assert!(paths["/v1/refunds/{refund_id}"]["delete"]["x-idempotency"].is_object());
/// assert!(paths["/v1/refunds/{refund_id}"]["get"].get("x-idempotency").is_none());
/// assert!(paths["/v1/charges"]["post"].get("x-idempotency").is_none());
/// ```
pub fn describe_paths<P: AsRef<str>>(
    document: &mut Value,
    layer: &LayerDoc,
    paths: impl IntoIterator<Item = P>,
) -> Vec<String> {
    let facts = layer.facts();
    let mut missing = Vec::new();
    let mut described = false;
    let Some(items) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return paths.into_iter().map(|p| p.as_ref().to_owned()).collect();
    };
    for named in paths {
        let named = named.as_ref();
        let shape = shape(named);
        let mut found = false;
        for (_, item) in items
            .iter_mut()
            .filter(|(path, _)| self::shape(path) == shape)
        {
            found = true;
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for (method, operation) in item.iter_mut() {
                if UNSAFE_METHODS.contains(&method.as_str()) {
                    facts.describe(operation);
                    described = true;
                }
            }
            // OpenAPI 3.2: the operations of other methods, by their HTTP names.
            if let Some(more) = item
                .get_mut("additionalOperations")
                .and_then(Value::as_object_mut)
            {
                for (method, operation) in more.iter_mut() {
                    if !is_safe(method) {
                        facts.describe(operation);
                        described = true;
                    }
                }
            }
        }
        if !found {
            missing.push(named.to_owned());
        }
    }
    if described {
        add_problem_schema(document);
    }
    missing
}

/// The fixed fields of an OpenAPI Path Item whose operations the middlewares make idempotent:
/// all but `get`, `head`, `options` and `trace` (the methods of `http::layer::is_safe`).
const UNSAFE_METHODS: [&str; 5] = ["post", "put", "patch", "delete", "query"];

/// `GET`, `HEAD`, `OPTIONS` and `TRACE`, which pass through the middlewares.
fn is_safe(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "TRACE"]
        .iter()
        .any(|safe| method.eq_ignore_ascii_case(safe))
}

/// A path with each parameter as `{}`: `/a/{id}`, `/a/:id` and `/a/{*rest}` are `/a/{}`.
fn shape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        if segment.starts_with([':', '*']) {
            out.push_str("{}");
            continue;
        }
        let mut rest = segment;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            out.push_str(&rest[..open]);
            out.push_str("{}");
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
    }
    out
}

#[cfg(any(feature = "axum", feature = "actix"))]
impl crate::http::layer::LayerConfig {
    /// The description of the middleware this configures.
    pub(crate) fn doc(&self) -> LayerDoc {
        use crate::http::layer::LayerScope;
        let scope = match &self.scope {
            LayerScope::Unset => vec!["default".to_owned()],
            LayerScope::Global => Vec::new(),
            LayerScope::Of(_, Some(names)) => names.to_vec(),
            LayerScope::Of(_, None) => vec!["scope(..)".to_owned()],
        };
        LayerDoc {
            // Without a lookup, the middleware replays `latest_state` exactly.
            contract: match self.handler.contract {
                Contract::LatestState => Contract::ExactReplay,
                contract => contract,
            },
            ttl: self.handler.ttl,
            remember: self.handler.remember,
            header: crate::http::display_header_name(&self.header),
            scope,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn layer() -> LayerDoc {
        LayerDoc {
            contract: Contract::SuppressOnly,
            ttl: Duration::from_secs(3_600),
            remember: None,
            header: "X-Request-Id".into(),
            scope: vec!["header(\"X-Tenant-Id\")".into()],
        }
    }

    #[test]
    fn parameters_match_whatever_their_name_and_spelling() {
        for (a, b) in [
            ("/v1/refunds/{id}", "/v1/refunds/{refund_id}"),
            ("/v1/refunds/:id", "/v1/refunds/{id}"),
            ("/files/*rest", "/files/{*rest}"),
            ("/files/{rest}", "/files/{*rest}"),
            ("/a/{x}.json", "/a/{y}.json"),
            ("/", "/"),
        ] {
            assert_eq!(shape(a), shape(b), "{a} {b}");
        }
        for (a, b) in [
            ("/t", "/t/"),
            ("/v1/refunds", "/v1/refunds/{id}"),
            ("/a/{x}.json", "/a/{x}"),
            ("/a/{x}/b", "/a/{x}/c"),
            ("/a:b", "/a/{b}"),
        ] {
            assert_ne!(shape(a), shape(b), "{a} {b}");
        }
        // An unclosed brace is text.
        assert_eq!(shape("/a/{b"), "/a/{b");
    }

    #[test]
    fn unsafe_methods_are_described_and_safe_ones_are_not() {
        let ops = |names: &[&str]| {
            names
                .iter()
                .map(|m| (m.to_string(), json!({ "responses": {} })))
                .collect::<serde_json::Map<_, _>>()
        };
        let mut item = Value::Object(ops(&[
            "get", "head", "options", "trace", "post", "put", "patch", "delete", "query",
        ]));
        item["summary"] = json!("Refunds");
        item["parameters"] = json!([]);
        item["additionalOperations"] = Value::Object(ops(&["COPY", "Get"]));
        let mut document = json!({ "paths": { "/refunds/{id}": item, "/other": { "post": {} } } });
        assert!(describe_paths(&mut document, &layer(), ["/refunds/:id"]).is_empty());
        let item = &document["paths"]["/refunds/{id}"];
        for method in ["post", "put", "patch", "delete", "query"] {
            assert_eq!(
                item[method]["x-idempotency"],
                layer().extension(),
                "{method}"
            );
            assert_eq!(item[method]["parameters"][0]["name"], "X-Request-Id");
        }
        assert!(item["additionalOperations"]["COPY"]["x-idempotency"].is_object());
        for method in ["get", "head", "options", "trace"] {
            assert_eq!(item[method], json!({ "responses": {} }), "{method}");
        }
        assert_eq!(
            item["additionalOperations"]["Get"],
            json!({ "responses": {} })
        );
        assert_eq!(
            (&item["summary"], &item["parameters"]),
            (&json!("Refunds"), &json!([]))
        );
        assert_eq!(document["paths"]["/other"], json!({ "post": {} }));
        assert!(document["components"]["schemas"][super::super::PROBLEM_SCHEMA].is_object());
    }

    #[test]
    fn paths_not_in_the_document_are_returned_and_change_nothing() {
        let mut document = json!({ "paths": { "/a": { "get": {} } } });
        let before = document.clone();
        assert_eq!(
            describe_paths(&mut document, &layer(), ["/a", "/b"]),
            ["/b"]
        );
        // Only a safe method: nothing described, no schema added.
        assert_eq!(document, before);
        let mut empty = json!({});
        assert_eq!(describe_paths(&mut empty, &layer(), ["/a"]), ["/a"]);
    }

    #[cfg(feature = "axum")]
    #[test]
    fn the_methods_described_are_those_the_middlewares_protect() {
        use crate::http::layer::is_safe as passes_through;
        let method = |name: &str| http::Method::from_bytes(name.as_bytes()).unwrap();
        // The Path Item's fixed fields, and `additionalOperations` by their HTTP names.
        for field in [
            "get", "head", "options", "trace", "post", "put", "patch", "delete", "query",
        ] {
            let protected = !passes_through(&method(&field.to_ascii_uppercase()));
            assert_eq!(UNSAFE_METHODS.contains(&field), protected, "{field}");
        }
        for name in ["COPY", "CONNECT", "LOCK", "GET", "Trace"] {
            let protected = !passes_through(&method(&name.to_ascii_uppercase()));
            assert_eq!(!is_safe(name), protected, "{name}");
        }
    }
}
