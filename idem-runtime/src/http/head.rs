//! [`RequestHead`]: the part of a request a front reads the client key, the operation name and
//! the default scope from, in `http` 1.x types whatever the framework's own.

use http::{HeaderMap, HeaderValue, Method, Uri};

use crate::engine::{Idem, IdempotencyError, RequestKey, ScopeTaker, default_scope_parts};
use crate::http::KeySource;
use crate::key::{InvalidKey, ScopePart, parse_header_key, validate_key};

/// The head of a request as the fronts' contexts keep it.
#[derive(Debug, Clone)]
pub(crate) struct RequestHead {
    pub(crate) headers: HeaderMap,
    pub(crate) method: Method,
    /// Reference-counted, not copied: its path is what `path()` gives.
    pub(crate) uri: Uri,
    /// The router's matched template (`/v1/payments/{id}/refunds`), if routed.
    pub(crate) route: Option<String>,
    /// The handle's default scope of this request ([`Idem::default_scope_of`]).
    pub(crate) default_scope: Option<Option<Vec<String>>>,
}

impl RequestHead {
    /// The head of `parts`, routed by `route`, with `idem`'s default scope computed.
    #[cfg(feature = "axum")]
    pub(crate) fn new(idem: &Idem, parts: &http::request::Parts, route: Option<String>) -> Self {
        RequestHead {
            default_scope: idem.default_scope_of(parts),
            headers: parts.headers.clone(),
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            route,
        }
    }

    /// [`RequestHead::new`] of parts built for it (a front on another `http` version): kept,
    /// not copied.
    #[cfg(feature = "actix")]
    pub(crate) fn from_parts(
        idem: &Idem,
        parts: http::request::Parts,
        route: Option<String>,
    ) -> Self {
        RequestHead {
            default_scope: idem.default_scope_of(&parts),
            headers: parts.headers,
            method: parts.method,
            uri: parts.uri,
            route,
        }
    }

    pub(crate) fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers.get(name)
    }

    pub(crate) fn path(&self) -> &str {
        self.uri.path()
    }

    /// `"<METHOD> <route template>"`, or the request path when not routed.
    pub(crate) fn route_operation(&self) -> String {
        let route = self.route.as_deref().unwrap_or(self.path());
        let method = self.method.as_str();
        let mut operation = String::with_capacity(method.len() + 1 + route.len());
        operation.push_str(method);
        operation.push(' ');
        operation.push_str(route);
        operation
    }

    /// The parts of the handle's default scope for this request.
    pub(crate) fn default_scope(&self) -> Result<Vec<String>, IdempotencyError> {
        let (method, path) = (self.method.as_str(), Some(self.path()));
        default_scope_parts(&self.default_scope, ScopeTaker::HANDLER, method, path)
    }

    /// The client key of `source` and its scoped form; `operation` `None` names it after the
    /// route ([`RequestHead::route_operation`]).
    pub(crate) fn key(
        &self,
        source: KeySource<'_>,
        operation: Option<&str>,
        scope: &[&dyn ScopePart],
    ) -> Result<RequestKey, IdempotencyError> {
        let client = match source {
            KeySource::Header(name) => header_key(&self.headers, name)?,
            KeySource::Value(value) => {
                validate_key(value)?;
                value.to_owned()
            }
        };
        Ok(match operation {
            Some(op) => RequestKey::new(op, scope, client)?,
            None => RequestKey::new(&self.route_operation(), scope, client)?,
        })
    }
}

/// The client key of header `name`: missing -> `MissingKey`; repeated, or not an sf-string nor a
/// bare key -> `InvalidKey`.
pub(crate) fn header_key(headers: &HeaderMap, name: &str) -> Result<String, IdempotencyError> {
    let mut values = headers.get_all(name).iter();
    let value = values.next().ok_or_else(|| IdempotencyError::MissingKey {
        header: display_header_name(name),
    })?;
    if values.next().is_some() {
        return Err(InvalidKey::Repeated.into());
    }
    Ok(parse_header_key(value.as_bytes())?)
}

/// `idempotency-key` -> `Idempotency-Key`, for messages.
pub(crate) fn display_header_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}
