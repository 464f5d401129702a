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
use crate::engine::{HandlerConfig, Idem, IdempotencyError};
use crate::fingerprint::RequestHash;
use crate::json::{Canonicalizer, Spec};
use crate::key::{ScopePart, ScopedKey, scoped_key};

type ScopeFn = dyn Fn(&Parts) -> Vec<String> + Send + Sync;

/// The scoped key and the client key of a request, or why it cannot be scoped.
pub(crate) type KeyOf = Result<(ScopedKey, String), IdempotencyError>;

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
}

/// Where a middleware's key scope comes from.
#[derive(Clone)]
pub(crate) enum LayerScope {
    /// Not chosen: the `Idem` handle's default scope, which must then exist.
    Unset,
    /// Every caller shares the keys (chosen with `global()`).
    Global,
    /// Computed from each request (`scope(..)`).
    Of(Arc<ScopeFn>),
}

impl LayerScope {
    pub(crate) fn of(f: impl Fn(&Parts) -> Vec<String> + Send + Sync + 'static) -> Self {
        LayerScope::Of(Arc::new(f))
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

    /// The fingerprint of `body` (or why it has none: `400`), and the scoped key of
    /// `client_key` for the request (or why it cannot be scoped).
    pub(crate) fn key(
        &self,
        parts: &Parts,
        client_key: String,
        body: &[u8],
    ) -> Result<(KeyOf, RequestHash), IdempotencyError> {
        let hash = self.canonicalizer.fingerprint_slice(body, &self.spec)?;
        let operation = match self.handler.operation() {
            Some(op) => Cow::Borrowed(op),
            None => Cow::Owned(format!("{} {}", parts.method, parts.uri.path())),
        };
        let scope = match &self.scope {
            LayerScope::Of(f) => Some(f(parts)),
            LayerScope::Global => Some(Vec::new()),
            // `assert_scoped` checked that the handle has one.
            LayerScope::Unset => self.idem.default_scope_of(parts).flatten(),
        };
        let key = match scope {
            Some(scope) => {
                let scope: Vec<&dyn ScopePart> =
                    scope.iter().map(|s| s as &dyn ScopePart).collect();
                scoped_key(&operation, &scope, &client_key)
                    .map(|scoped| (scoped, client_key))
                    .map_err(IdempotencyError::from)
            }
            None => Err(IdempotencyError::Unscoped),
        };
        Ok((key, hash))
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

/// `GET`, `HEAD`, `OPTIONS` and `TRACE` pass through the middlewares untouched.
pub(crate) fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}
