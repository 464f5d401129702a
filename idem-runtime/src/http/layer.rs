//! What the two middlewares (the tower `IdempotencyLayer`, the actix `Idempotency`) share: their
//! configuration, and everything they do with a request between reading its body and running
//! the engine — the client key, the fingerprint, the operation, the scope — and the snapshot
//! rules of their responses.

use std::borrow::Cow;
use std::sync::Arc;

use http::Method;
use http::request::Parts;

use super::headers::IDEMPOTENCY_KEY;
use super::snapshot::SnapshotRules;
use super::{DEFAULT_BODY_LIMIT, header_key};
use crate::engine::{HandlerConfig, Idem, IdempotencyError, RequestKey};
use crate::fingerprint::RequestHash;
use crate::json::{Canonicalizer, Spec};
use crate::key::ScopePart;

type ScopeFn = dyn Fn(&Parts) -> Option<Vec<String>> + Send + Sync;

/// The key of a request, or why it cannot be scoped.
pub(crate) type KeyOf = Result<RequestKey, IdempotencyError>;

/// A middleware's configuration.
#[derive(Clone)]
pub(crate) struct LayerConfig {
    pub idem: Idem,
    /// What the middleware shares with `#[idempotent]` handlers: operation, contract,
    /// durations, fail-open, replay headers, snapshot size.
    pub handler: HandlerConfig,
    pub spec: Spec,
    pub canonicalizer: Canonicalizer,
    pub header: String,
    pub body_limit: usize,
    pub biz_no_field: String,
    pub scope: LayerScope,
    /// The query string is part of the request's fingerprint (the default).
    pub hash_query: bool,
}

/// Where a middleware's key scope comes from.
#[derive(Clone)]
pub(crate) enum LayerScope {
    /// Not chosen: the `Idem` handle's default scope, which must then exist.
    Unset,
    /// Every caller shares the keys (chosen with `global()`).
    Global,
    /// Computed from each request (`scope(..)`), with the names of its parts for the API
    /// description when given (`scope_named(..)`).
    Of(
        Arc<ScopeFn>,
        #[cfg_attr(not(feature = "openapi"), allow(dead_code))] Option<Arc<[String]>>,
    ),
}

impl LayerScope {
    pub(crate) fn of(
        names: Option<Arc<[String]>>,
        f: impl Fn(&Parts) -> Option<Vec<String>> + Send + Sync + 'static,
    ) -> Self {
        LayerScope::Of(Arc::new(f), names)
    }
}

impl LayerConfig {
    /// The defaults: [`HandlerConfig::for_route`], `Idempotency-Key`, 1 MiB bodies, the
    /// business number in `"id"`, the handle's default scope.
    pub(crate) fn new(idem: Idem, spec: Spec) -> Self {
        LayerConfig {
            idem,
            handler: HandlerConfig::for_route(),
            spec,
            canonicalizer: Canonicalizer::new(),
            header: IDEMPOTENCY_KEY.to_owned(),
            body_limit: DEFAULT_BODY_LIMIT,
            biz_no_field: "id".to_owned(),
            scope: LayerScope::Unset,
            hash_query: true,
        }
    }

    /// Panics, naming the middleware `what`, when it has no scope: neither `scope(..)` nor
    /// `global()`, and its handle no default scope.
    pub(crate) fn assert_scoped(&self, what: &str) {
        if matches!(self.scope, LayerScope::Unset) && !self.idem.has_default_scope() {
            panic!(
                "{what} without a scope: its keys would be shared by every caller. Scope them by the caller's identity with `.scope(|parts| ..)` or `Idem::with_default_scope`, or say `.global()` when every caller may share them"
            );
        }
    }

    /// The client key of the request, read before its body.
    pub(crate) fn client_key(&self, parts: &Parts) -> Result<String, IdempotencyError> {
        header_key(&parts.headers, &self.header)
    }

    /// The fingerprint of the request (or why it has none: `400`), and the scoped key of
    /// `client_key` for it (or why it cannot be scoped).
    ///
    /// The operation is `"<METHOD> <path>"` (unless configured), the path as routed from the
    /// top of the application — inside `Router::nest` the whole one, not the nested router's
    /// rest — in its normal form ([`normal_path`]). The fingerprint is the body's, hashed with
    /// what else selects the request ([`request_hash`]): the query unless
    /// [`ignore_query`](crate::axum::IdempotencyLayer::ignore_query), and the path when the
    /// operation is a fixed name.
    pub(crate) fn key(
        &self,
        parts: &Parts,
        client_key: String,
        body: &[u8],
    ) -> Result<(KeyOf, RequestHash), IdempotencyError> {
        let body = if body.is_empty() {
            None
        } else {
            Some(self.canonicalizer.fingerprint_slice(body, &self.spec)?)
        };
        let own = normal_path(parts.uri.path());
        let routed = routed_path(parts).map(normal_path);
        let query = parts
            .uri
            .query()
            .filter(|q| self.hash_query && !q.is_empty());
        // The operation keeps the name it had before the path was hashed (the service's own
        // path): renaming it would move stored keys, and a retry in flight across the upgrade
        // would run again under a new operation id. The whole path, where it says more (a
        // nested router's prefix) or the operation is a fixed name, is hashed instead: a
        // request to another resource then gets `422`, never this one's answer.
        let (operation, hashed_path) = match self.handler.operation() {
            Some(op) => (Cow::Borrowed(op), Some(routed.as_deref().unwrap_or(&own))),
            None => (
                Cow::Owned(format!("{} {own}", parts.method)),
                routed.as_deref().filter(|r| *r != own),
            ),
        };
        let hash = request_hash(body, hashed_path, query);
        let scope = match &self.scope {
            LayerScope::Of(f, _) => f(parts),
            LayerScope::Global => Some(Vec::new()),
            // `assert_scoped` checked that the handle has one.
            LayerScope::Unset => self.idem.default_scope_of(parts).flatten(),
        };
        let key = match scope {
            Some(scope) => {
                let scope: Vec<&dyn ScopePart> =
                    scope.iter().map(|s| s as &dyn ScopePart).collect();
                RequestKey::new(&operation, &scope, client_key).map_err(IdempotencyError::from)
            }
            None => Err(IdempotencyError::Unscoped),
        };
        Ok((key, hash))
    }

    /// What becomes of the record of a response of `status` from the wrapped service: the
    /// handle's policy, except for the framework's refusals of the request's form (405, 406,
    /// 411, 413, 414, 415, 431), which are released under every contract. Behind a middleware
    /// the wrapped service includes its extractors: a `415` for a body without a JSON content
    /// type, a `413` over the handler's body limit come before any handler logic, and the
    /// corrected retry with the same key must run, not be replayed the refusal. (An
    /// `#[idempotent]` handler's extractors run before idem: its own such answers follow the
    /// policy, since the handler may have done work before giving them.)
    pub(crate) fn disposition(&self, status: u16) -> crate::engine::Disposition {
        match status {
            405 | 406 | 411 | 413 | 414 | 415 | 431 => crate::engine::Disposition::Release,
            _ => self.idem.policy().classify(self.handler.contract, status),
        }
    }

    /// How the middleware snapshots a response: the business number read from its body.
    pub(crate) fn rules(&self) -> SnapshotRules<'_, &'static str> {
        SnapshotRules {
            replay_headers: self.handler.replay_headers,
            limit: self
                .handler
                .max_snapshot_bytes
                .unwrap_or(self.idem.max_snapshot_bytes()),
            biz_no_field: &self.biz_no_field,
            biz_no_from_body: true,
            key_fields: Vec::new(),
        }
    }
}

/// The request's path from the top of the application, when the service sees less of it:
/// axum's `OriginalUri` when a router nested this one (which sees its own rest of the path).
fn routed_path(parts: &Parts) -> Option<&str> {
    #[cfg(feature = "axum")]
    if let Some(original) = parts.extensions.get::<axum::extract::OriginalUri>() {
        return Some(original.0.path());
    }
    let _ = parts;
    None
}

/// `path` in the normal form of RFC 3986 (6.2.2): a percent-escape of an unreserved character
/// (`A-Z a-z 0-9 - . _ ~`) is that character, other escapes are upper case. Two spellings a
/// router takes for one resource (`/accounts/%41` and `/accounts/A`) are then one operation,
/// and a retry that spells its URL otherwise is not a second request. Trailing slashes and dot
/// segments stay: routers tell `/t` and `/t/` apart unless told otherwise (normalise them
/// before the router, e.g. with tower-http's `NormalizePath`, and the layer sees the result).
pub(crate) fn normal_path(path: &str) -> Cow<'_, str> {
    if !path.contains('%') {
        return Cow::Borrowed(path);
    }
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = hex_pair(bytes.get(i + 1..i + 3))
        {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                out.push(char::from(byte));
            } else {
                out.push('%');
                out.push_str(&path[i + 1..i + 3].to_ascii_uppercase());
            }
            i += 3;
            continue;
        }
        let next = path[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(next);
        i += next.len_utf8();
    }
    Cow::Owned(out)
}

/// The byte of the two hex digits after a `%`; `None` for anything else (`%+5` is no escape to
/// a router or to `Query<T>`).
fn hex_pair(pair: Option<&[u8]>) -> Option<u8> {
    crate::encode::hex_byte(pair?)
}

/// The fingerprint of a request the middlewares see: the body's own (`None` for a request
/// without one), or, when a path or a query also selects it, the canonical array
/// `["request", "<hex of the body's hash>" | null, "<path>" | null, [["name", "value"], ..] | null]`
/// (the query's pairs form-decoded and stably sorted by name, so that `?b=2&a=1` is `?a=1&b=2`
/// while `?a=1&a=2` keeps its order). An array, where a body's canonical text is an object: no
/// body can hash as another request's wrapper. A request with a body and nothing else hashes
/// as before.
pub(crate) fn request_hash(
    body: Option<RequestHash>,
    path: Option<&str>,
    query: Option<&str>,
) -> RequestHash {
    if let (Some(body), None, None) = (body, path, query) {
        return body;
    }
    let body = body.map(|b| b.hex());
    let query = query.map(query_pairs);
    RequestHash::of_canonical(|w| {
        w.raw(b"[");
        w.str("request");
        w.raw(b",");
        match &body {
            // Hex digits, which a JSON string holds as they are: the bytes of `w.str(hex)`.
            Some(hex) => {
                w.raw(b"\"");
                w.raw(hex);
                w.raw(b"\"");
            }
            None => w.null(),
        }
        w.raw(b",");
        match path {
            Some(path) => w.str(path),
            None => w.null(),
        }
        w.raw(b",");
        match &query {
            Some(pairs) => {
                w.raw(b"[");
                for (i, (name, value)) in pairs.iter().enumerate() {
                    if i > 0 {
                        w.raw(b",");
                    }
                    w.raw(b"[");
                    w.str(name);
                    w.raw(b",");
                    w.str(value);
                    w.raw(b"]");
                }
                w.raw(b"]");
            }
            None => w.null(),
        }
        w.raw(b"]");
    })
}

/// The `name=value` pairs of a query, form-decoded (`+` is a space, percent-escapes their
/// bytes, as `Query<T>` reads them), stably sorted by name.
fn query_pairs(query: &str) -> Vec<(Cow<'_, str>, Cow<'_, str>)> {
    let mut pairs: Vec<_> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (form_decode(name), form_decode(value))
        })
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs
}

/// `text` with `+` as a space and percent-escapes decoded (invalid UTF-8 replaced); borrowed
/// when it has neither.
fn form_decode(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    if !bytes.iter().any(|&b| b == b'+' || b == b'%') {
        return Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if let Some(byte) = hex_pair(bytes.get(i + 1..i + 3)) => {
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(match String::from_utf8(out) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// `GET`, `HEAD`, `OPTIONS` and `TRACE` pass through the middlewares untouched.
pub(crate) fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// The configuration methods of a middleware type `$ty` (a struct with one field
/// `config: Arc<LayerConfig>`), written once for the tower `IdempotencyLayer` and the actix
/// `Idempotency`: the same names, semantics and documentation on both. `$path` is the type's
/// path under `idem_runtime` (as `"axum::IdempotencyLayer"`), for the doc examples.
macro_rules! middleware_builder {
    ($ty:ident, $path:literal) => {
        impl ::core::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let c = &self.config;
                f.debug_struct(stringify!($ty))
                    .field("config", &c.handler)
                    .field("header", &c.header)
                    .field("body_limit", &c.body_limit)
                    .field("biz_no_field", &c.biz_no_field)
                    .finish_non_exhaustive()
            }
        }

        impl $ty {
            /// A middleware over `idem` fingerprinting request bodies under `spec`. Defaults:
            /// the settings of [`HandlerConfig::for_route`](crate::engine::HandlerConfig::for_route)
            /// (operation `"<METHOD> <path>"`, `exact_replay`, the TTL, lease and timeout of
            /// `#[idempotent]`: 7 days, 30 s, 4 leases; fail closed), key header
            /// `Idempotency-Key`, 1 MiB bodies, business number in the response's `"id"`
            /// member, the handle's default scope (see [`scope`](Self::scope) and
            /// [`global`](Self::global)).
            ///
            /// ```
            #[doc = concat!("use idem_runtime::", $path, " as Middleware;")]
            /// use idem_runtime::{Spec, ValueSpec, engine::Idem};
            /// let mw = Middleware::new(
            ///     Idem::new(idem_runtime::store::MemoryStore::new()),
            ///     Spec::new().field("amount", ValueSpec::Decimal),
            /// );
            /// # let _ = mw;
            /// ```
            pub fn new(idem: $crate::engine::Idem, spec: $crate::json::Spec) -> Self {
                $ty {
                    config: ::std::sync::Arc::new($crate::http::layer::LayerConfig::new(idem, spec)),
                }
            }

            /// A middleware whose spec is that of `#[derive(Fingerprint)]` type `T`: the raw
            /// body hashes to exactly `T::fingerprint()` of the deserialized value.
            ///
            /// # Panics
            /// When `T` is not a struct with named fields (its canonical form is not an object).
            ///
            /// ```
            #[doc = concat!("use idem_runtime::", $path, " as Middleware;")]
            /// use idem_runtime::engine::Idem;
            /// # mod m { use idem_runtime::json::{Spec, ValueSpec}; use idem_runtime::fingerprint::*;
            /// # pub struct Pay { pub amount: u64 }
            /// # impl idem_runtime::Canonical for Pay {
            /// #     fn write_canonical(&self, w: &mut CanonicalWriter<'_>) { w.raw(b"{}") }
            /// #     fn value_spec() -> ValueSpec { ValueSpec::Object(Spec::new().field("amount", ValueSpec::Decimal)) }
            /// # }
            /// # impl Fingerprint for Pay { type Fields = NoFields; const FIELDS: NoFields = NoFields;
            /// #     fn write_fields(&self, w: &mut CanonicalWriter<'_>, _: FieldMask) { w.raw(b"{}") } }
            /// # }
            /// // with `#[derive(idem::Fingerprint)] struct Pay { amount: Decimal }`:
            /// let mw = Middleware::for_type::<m::Pay>(Idem::new(idem_runtime::store::MemoryStore::new()));
            /// # let _ = mw;
            /// ```
            pub fn for_type<T: $crate::fingerprint::Fingerprint>(idem: $crate::engine::Idem) -> Self {
                match T::value_spec() {
                    $crate::json::ValueSpec::Object(spec) => Self::new(idem, spec),
                    other => panic!(
                        concat!(
                            stringify!($ty),
                            "::for_type::<{}>: the type's canonical form is not an object ({:?}); use a struct with named fields, or ",
                            stringify!($ty),
                            "::new with a Spec"
                        ),
                        ::core::any::type_name::<T>(),
                        other
                    ),
                }
            }

            fn edit(mut self, f: impl FnOnce(&mut $crate::http::layer::LayerConfig)) -> Self {
                f(::std::sync::Arc::make_mut(&mut self.config));
                self
            }

            /// The request header carrying the client key (default `Idempotency-Key`).
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.header("X-Idempotency-Key");
            /// ```
            #[must_use]
            pub fn header(self, name: impl Into<String>) -> Self {
                let name = name.into().to_ascii_lowercase();
                self.edit(|c| c.header = name)
            }

            /// The settings the middleware shares with `#[idempotent]` handlers: the
            /// operation, contract, TTL, lease, timeout, fail-open, replay headers and largest
            /// snapshot of `config` (default
            /// [`HandlerConfig::for_route`](crate::engine::HandlerConfig::for_route): each
            /// request's `"<METHOD> <path>"` names its operation). The contract `latest_state`
            /// replays exactly: the middleware has no lookup. Each call replaces the whole
            /// configuration.
            ///
            /// `HandlerConfig` holds `&'static` strings (it is `Copy` and built in `const`
            /// code, so that `#[idempotent]` can make it a `static`). A name or header list
            /// known only at run time is leaked where the application is built
            /// (`String::leak`): that costs its bytes once per application, never per request.
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// use core::time::Duration;
            /// use idem_runtime::engine::{Contract, HandlerConfig};
            ///
            /// let mw = mw.config(
            ///     HandlerConfig::new("payments.create")
            ///         .contract(Contract::SuppressOnly)
            ///         .ttl(Duration::from_secs(90 * 86_400))
            ///         .lease(Duration::from_secs(10))
            ///         .timeout(Duration::from_secs(60))
            ///         .replay_headers(&["x-balance"])
            ///         .max_snapshot_bytes(16 * 1024),
            /// );
            /// // Or: an operation named at run time, leaked once for the application's life.
            /// let region = String::from("eu");
            /// let operation = format!("payments.create.{region}").leak();
            /// let mw = mw.config(HandlerConfig::new(operation));
            /// ```
            #[must_use]
            pub fn config(self, config: $crate::engine::HandlerConfig) -> Self {
                self.edit(|c| c.handler = config)
            }

            /// Largest request body read (default 1 MiB); over it: `413 body-too-large`.
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.body_limit(64 * 1024);
            /// ```
            #[must_use]
            pub fn body_limit(self, bytes: usize) -> Self {
                self.edit(|c| c.body_limit = bytes)
            }

            /// The top-level member of JSON response bodies holding the business number
            /// (default `"id"`).
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.biz_no_field("payment_id");
            /// ```
            #[must_use]
            pub fn biz_no_field(self, field: impl Into<String>) -> Self {
                let field = field.into();
                self.edit(|c| c.biz_no_field = field)
            }

            /// The key's scope (tenant, user, ...) computed from each request's head (method,
            /// URI, headers, in `http` 1.x types), e.g. from a header; `None` when the request
            /// has none (no caller identity), which is refused with `401` `unscoped` and runs
            /// nothing — never filed under an empty scope that every such caller would share.
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.scope(|parts| {
            ///     let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
            ///     Some(vec![tenant.to_owned()])
            /// });
            /// ```
            #[must_use]
            pub fn scope(
                self,
                f: impl Fn(&::http::request::Parts) -> Option<Vec<String>> + Send + Sync + 'static,
            ) -> Self {
                self.edit(|c| c.scope = $crate::http::layer::LayerScope::of(None, f))
            }

            /// [`scope`](Self::scope), with the names of the parts `f` returns, in order, for
            /// the API description of the middleware's routes (the `scope` of their
            /// `x-idempotency`, feature `openapi`): what a caller's key is shared by, written
            /// as `#[idempotent(scope = [..])]` would (`header("X-Tenant-Id")`,
            /// `caller.tenant_id`). A scope without names is described as `["scope(..)"]`.
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.scope_named(["header(\"X-Tenant-Id\")"], |parts| {
            ///     let tenant = parts.headers.get("x-tenant-id")?.to_str().ok()?;
            ///     Some(vec![tenant.to_owned()])
            /// });
            /// ```
            #[must_use]
            pub fn scope_named<N: Into<String>>(
                self,
                names: impl IntoIterator<Item = N>,
                f: impl Fn(&::http::request::Parts) -> Option<Vec<String>> + Send + Sync + 'static,
            ) -> Self {
                let names = names.into_iter().map(Into::into).collect();
                self.edit(|c| c.scope = $crate::http::layer::LayerScope::of(Some(names), f))
            }

            /// Leaves the query string out of the fingerprint: for routes whose query never
            /// changes what the handler does (tracking parameters, say). By default it is
            /// hashed with the body, so that `POST /payouts?dry_run=true` and `POST /payouts`
            /// under one key are two requests (`422`), not a replay of the dry run.
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.ignore_query();
            /// ```
            #[must_use]
            pub fn ignore_query(self) -> Self {
                self.edit(|c| c.hash_query = false)
            }

            /// Keys shared by every caller: one key space per operation. Right for a single
            /// client, or keys that are unique across clients by construction; otherwise one
            /// caller reusing another's key would be answered with the other's stored
            /// response.
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.global();
            /// ```
            #[must_use]
            pub fn global(self) -> Self {
                self.edit(|c| c.scope = $crate::http::layer::LayerScope::Global)
            }

            /// The canonicalizer options (nesting limit, unknown fields).
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// use idem_runtime::json::Canonicalizer;
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let mw = mw.canonicalizer(Canonicalizer::new().deny_unknown_fields(true));
            /// ```
            #[must_use]
            pub fn canonicalizer(self, canonicalizer: $crate::json::Canonicalizer) -> Self {
                self.edit(|c| c.canonicalizer = canonicalizer)
            }

            /// What the API description of the middleware's routes says (feature `openapi`):
            /// its contract, TTL, key header and scope. Give it, with the paths the middleware
            /// covers, to [`describe_paths`](crate::openapi::describe_paths), or to utoipa's
            /// `Idempotency.layer(..)` (feature `utoipa`), which takes the middleware itself.
            ///
            /// ```
            #[doc = concat!("# use idem_runtime::", $path, " as Middleware;")]
            /// # use idem_runtime::{Spec, engine::Idem};
            /// # let mw = Middleware::new(Idem::new(idem_runtime::store::MemoryStore::new()), Spec::new());
            /// let doc = mw.header("X-Request-Id").global().doc();
            /// assert_eq!(doc.header, "X-Request-Id");
            /// assert_eq!(doc.ttl, idem_runtime::engine::DEFAULT_TTL);
            /// assert!(doc.scope.is_empty());
            /// ```
            #[cfg(feature = "openapi")]
            #[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
            pub fn doc(&self) -> $crate::openapi::LayerDoc {
                self.config.doc()
            }
        }

        #[cfg(feature = "openapi")]
        #[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
        impl From<&$ty> for $crate::openapi::LayerDoc {
            /// The middleware's `doc()`.
            fn from(middleware: &$ty) -> Self {
                middleware.doc()
            }
        }
    };
}
pub(crate) use middleware_builder;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_take_their_normal_form() {
        assert_eq!(normal_path("/accounts/A"), "/accounts/A");
        assert_eq!(normal_path("/accounts/%41%7e"), "/accounts/A~");
        assert_eq!(normal_path("/a%2fb/%c3%a9"), "/a%2Fb/%C3%A9");
        assert_eq!(normal_path("/bad%4/%zz"), "/bad%4/%zz");
        // No escape: a router sees two paths.
        assert_eq!(normal_path("/p/%+a"), "/p/%+a");
        assert_ne!(normal_path("/p/%+a"), normal_path("/p/%+A"));
    }

    #[test]
    fn queries_hash_by_their_sorted_pairs() {
        let body = RequestHash::of_bytes(b"{}");
        assert_eq!(request_hash(Some(body), None, None), body);
        let q = |q| request_hash(Some(body), None, Some(q));
        assert_eq!(q("b=2&a=1"), q("a=1&b=2"));
        assert_eq!(q("note=a+b&"), q("note=a%20b"));
        assert_ne!(q("a=1&a=2"), q("a=2&a=1"));
        assert_ne!(q("a=1"), request_hash(Some(body), None, None));
        assert_ne!(
            request_hash(None, Some("/a"), None),
            request_hash(None, Some("/b"), None)
        );
        assert_ne!(request_hash(None, None, Some("a=1")), q("a=1"));
        // `%+5` is no escape: `Query<T>` hands the handler "% 5", another value than "%05"'s.
        assert_ne!(q("a=%+5"), q("a=%05"));
        assert_eq!(q("a=%+5"), q("a=%25+5"));
    }

    /// The canonical array, byte for byte: stored fingerprints are compared across versions, so
    /// a change of its text would answer every retry of a request in flight `422`.
    #[test]
    fn the_request_array_is_fixed_text() {
        let body = RequestHash::of_bytes(b"{}");
        let text = format!(
            r#"["request","{body}","/pay/%C3%A9",[["a","1 x"],["b","2"],["c",""],["note","é"]]]"#
        );
        assert_eq!(
            request_hash(
                Some(body),
                Some("/pay/%C3%A9"),
                Some("note=%C3%A9&b=2&a=1+x&c")
            ),
            RequestHash::of_bytes(text.as_bytes())
        );
        assert_eq!(
            request_hash(None, None, Some("a=1")),
            RequestHash::of_bytes(br#"["request",null,null,[["a","1"]]]"#)
        );
    }
}
