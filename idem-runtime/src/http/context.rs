//! [`IdemContext`] (the extractor `#[idempotent]` adds) and [`KeySource`].

use core::convert::Infallible;

use axum::extract::{FromRef, FromRequestParts, MatchedPath};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Uri};

use crate::engine::{Idem, IdempotencyError};
use crate::key::{InvalidKey, ScopedKey, parse_header_key, validate_key};
use crate::key::{ScopePart, scoped_key};

/// What an idempotent axum handler needs from its request besides its own arguments: the
/// [`Idem`] handle (from the router state, through `FromRef`), the request headers, method and
/// path. `#[idempotent]` adds it as the first parameter of the handler.
///
/// It never rejects: a missing or invalid key is answered by the generated handler with a problem
/// response, after the handler's own extractors ran.
///
/// ```
/// use axum::extract::FromRef;
/// use idem_runtime::engine::Idem;
/// use idem_runtime::http::IdemContext;
///
/// #[derive(Clone)]
/// struct AppState { idem: Idem, /* db pool, ... */ }
/// impl FromRef<AppState> for Idem {
///     fn from_ref(s: &AppState) -> Idem { s.idem.clone() }
/// }
///
/// async fn handler(cx: IdemContext) -> String {
///     cx.header("idempotency-key").map(|v| v.to_str().unwrap_or("?").to_owned()).unwrap_or_default()
/// }
/// let app: axum::Router = axum::Router::new()
///     .route("/", axum::routing::post(handler))
///     .with_state(AppState { idem: Idem::new(idem_runtime::store::MemoryStore::new()) });
/// # let _ = app;
/// ```
#[derive(Debug, Clone)]
pub struct IdemContext {
    idem: Idem,
    headers: HeaderMap,
    method: Method,
    /// The request's URI (reference-counted, not copied: its path is what `path()` gives).
    uri: Uri,
    route: Option<MatchedPath>,
    default_scope: Option<Option<Vec<String>>>,
}

impl IdemContext {
    /// A context for `parts` (for frameworks other than axum, and tests).
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// use idem_runtime::http::IdemContext;
    /// let (parts, ()) = http::Request::post("/payments").header("idempotency-key", "k").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.path(), "/payments");
    /// assert_eq!(cx.header("Idempotency-Key").unwrap(), "k");
    /// ```
    pub fn new(idem: Idem, parts: &Parts) -> Self {
        IdemContext {
            default_scope: idem.default_scope_of(parts),
            idem,
            headers: parts.headers.clone(),
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            route: parts.extensions.get::<MatchedPath>().cloned(),
        }
    }

    /// A request header (case-insensitive name).
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, http::IdemContext};
    /// let (parts, ()) = http::Request::post("/").header("x-tenant", "acme").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.header("X-Tenant").unwrap(), "acme");
    /// assert!(cx.header("x-user").is_none());
    /// ```
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers.get(name)
    }

    /// The [`Idem`] handle.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, http::IdemContext};
    /// # let (parts, ()) = http::Request::post("/").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.idem().max_snapshot_bytes(), 256 * 1024);
    /// ```
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// The request method.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, http::IdemContext};
    /// # let (parts, ()) = http::Request::post("/").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.method(), http::Method::POST);
    /// ```
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The request path.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, http::IdemContext};
    /// # let (parts, ()) = http::Request::post("/a/b?c=d").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.path(), "/a/b");
    /// ```
    pub fn path(&self) -> &str {
        self.uri.path()
    }

    /// axum's matched route template (`/v1/payments/{id}/refunds`), when the request was routed
    /// by an axum `Router`.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, http::IdemContext};
    /// let (parts, ()) = http::Request::post("/a").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.route(), None); // not routed
    /// ```
    pub fn route(&self) -> Option<&str> {
        self.route.as_ref().map(MatchedPath::as_str)
    }

    /// The operation name of a handler without `operation = ".."`: the method and the matched
    /// route template (`POST /v1/payments/{id}/refunds`), which survive renaming or moving the
    /// handler; outside an axum `Router`, the method and the request path.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, http::IdemContext};
    /// let (parts, ()) = http::Request::post("/a/b?c=d").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.route_operation(), "POST /a/b");
    /// ```
    pub fn route_operation(&self) -> String {
        format!("{} {}", self.method, self.route().unwrap_or(self.path()))
    }

    /// The scope parts of the router-wide default scope ([`Idem::with_default_scope`]) for this
    /// request: what `scope = default` uses.
    ///
    /// # Errors
    /// [`IdempotencyError::Unscoped`] (`401`) when the request carries no identity to scope by;
    /// [`IdempotencyError::Misconfigured`] (`500`, also logged) when the handle has no default
    /// scope.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, http::IdemContext};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new())
    ///     .with_default_scope(|parts| parts.headers.get("x-gateway-tenant")?.to_str().ok().map(|t| vec![t.to_owned()]));
    /// let (parts, ()) = http::Request::post("/").header("x-gateway-tenant", "acme").body(()).unwrap().into_parts();
    /// assert_eq!(IdemContext::new(idem.clone(), &parts).default_scope().unwrap(), ["acme"]);
    /// let (anonymous, ()) = http::Request::post("/").body(()).unwrap().into_parts();
    /// assert_eq!(IdemContext::new(idem, &anonymous).default_scope().unwrap_err().status(), 401);
    /// ```
    pub fn default_scope(&self) -> Result<Vec<String>, IdempotencyError> {
        match &self.default_scope {
            Some(Some(parts)) => Ok(parts.clone()),
            Some(None) => Err(IdempotencyError::Unscoped),
            None => {
                tracing::error!(
                    target: "idem",
                    method = %self.method,
                    path = %self.path(),
                    "a handler with `scope = default` runs on an `Idem` handle without a default \
                     scope: set one with `Idem::with_default_scope`, or give the handler its own \
                     `scope = [..]`; answering 500"
                );
                Err(IdempotencyError::Misconfigured {
                    message: "the handler takes the default scope (`scope = default`) and the `Idem` handle has none: set one with `Idem::with_default_scope`",
                })
            }
        }
    }

    /// The client key of `source` and its scoped form; `operation` `None` names it after the
    /// route ([`IdemContext::route_operation`]).
    pub(crate) fn key(
        &self,
        source: KeySource<'_>,
        operation: Option<&str>,
        scope: &[&dyn ScopePart],
    ) -> Result<(ScopedKey, String), IdempotencyError> {
        let client = match source {
            KeySource::Header(name) => header_key(&self.headers, name)?,
            KeySource::Value(value) => {
                validate_key(value)?;
                value.to_owned()
            }
        };
        let scoped = match operation {
            Some(op) => scoped_key(op, scope, &client)?,
            None => scoped_key(&self.route_operation(), scope, &client)?,
        };
        Ok((scoped, client))
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
fn display_header_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

impl<S: Send + Sync> FromRequestParts<S> for IdemContext
where
    Idem: FromRef<S>,
{
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let idem = Idem::from_ref(state);
        // Before the body's extractors run: their rejections use the handle's problem base.
        super::respond::ProblemBase::insert(&idem, &mut parts.extensions);
        Ok(IdemContext::new(idem, parts))
    }
}

/// Where the client key comes from.
///
/// ```
/// use idem_runtime::http::KeySource;
/// let from_header = KeySource::Header("Idempotency-Key");
/// let order_id = String::from("order-7");
/// let from_body = KeySource::Value(&order_id);
/// # let _ = (from_header, from_body);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource<'a> {
    /// A request header (case-insensitive), parsed as an sf-string or a bare key
    /// ([`parse_header_key`]). Missing: `400 missing-key`.
    Header(&'static str),
    /// A value of the request itself (a path parameter, a body field), taken as it is
    /// ([`validate_key`](crate::key::validate_key)).
    Value(&'a str),
}
