//! [`IdemContext`], the extractor `#[idempotent]` adds.

use core::convert::Infallible;

use axum::extract::{FromRef, FromRequestParts, MatchedPath};
use http::request::Parts;
use http::{HeaderValue, Method};

use crate::engine::{Idem, IdempotencyError};
use crate::http::RequestHead;

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
/// use idem_runtime::axum::IdemContext;
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
    pub(crate) head: RequestHead,
}

impl IdemContext {
    /// A context for `parts` (for frameworks other than axum, and tests).
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// use idem_runtime::axum::IdemContext;
    /// let (parts, ()) = http::Request::post("/payments").header("idempotency-key", "k").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.path(), "/payments");
    /// assert_eq!(cx.header("Idempotency-Key").unwrap(), "k");
    /// ```
    pub fn new(idem: Idem, parts: &Parts) -> Self {
        let route = parts.extensions.get::<MatchedPath>();
        let head = RequestHead::new(&idem, parts, route.map(|r| r.as_str().to_owned()));
        IdemContext { idem, head }
    }

    /// A request header (case-insensitive name).
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, axum::IdemContext};
    /// let (parts, ()) = http::Request::post("/").header("x-tenant", "acme").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.header("X-Tenant").unwrap(), "acme");
    /// assert!(cx.header("x-user").is_none());
    /// ```
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.head.header(name)
    }

    /// The [`Idem`] handle.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, axum::IdemContext};
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
    /// # use idem_runtime::{engine::Idem, axum::IdemContext};
    /// # let (parts, ()) = http::Request::post("/").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.method(), http::Method::POST);
    /// ```
    pub fn method(&self) -> &Method {
        &self.head.method
    }

    /// The request path.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, axum::IdemContext};
    /// # let (parts, ()) = http::Request::post("/a/b?c=d").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.path(), "/a/b");
    /// ```
    pub fn path(&self) -> &str {
        self.head.path()
    }

    /// axum's matched route template (`/v1/payments/{id}/refunds`), when the request was routed
    /// by an axum `Router`.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, axum::IdemContext};
    /// let (parts, ()) = http::Request::post("/a").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.route(), None); // not routed
    /// ```
    pub fn route(&self) -> Option<&str> {
        self.head.route.as_deref()
    }

    /// The operation name of a handler without `operation = ".."`: the method and the matched
    /// route template (`POST /v1/payments/{id}/refunds`), which survive renaming or moving the
    /// handler; outside an axum `Router`, the method and the request path.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, axum::IdemContext};
    /// let (parts, ()) = http::Request::post("/a/b?c=d").body(()).unwrap().into_parts();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &parts);
    /// assert_eq!(cx.route_operation(), "POST /a/b");
    /// ```
    pub fn route_operation(&self) -> String {
        self.head.route_operation()
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
    /// # use idem_runtime::{engine::Idem, axum::IdemContext};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new())
    ///     .with_default_scope(|parts| parts.headers.get("x-gateway-tenant")?.to_str().ok().map(|t| vec![t.to_owned()]));
    /// let (parts, ()) = http::Request::post("/").header("x-gateway-tenant", "acme").body(()).unwrap().into_parts();
    /// assert_eq!(IdemContext::new(idem.clone(), &parts).default_scope().unwrap(), ["acme"]);
    /// let (anonymous, ()) = http::Request::post("/").body(()).unwrap().into_parts();
    /// assert_eq!(IdemContext::new(idem, &anonymous).default_scope().unwrap_err().status(), 401);
    /// ```
    pub fn default_scope(&self) -> Result<Vec<String>, IdempotencyError> {
        self.head.default_scope()
    }
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

/// [`IdemContext`] as `#[idempotent]` adds it to an axum handler: `HANDLER` names the handler
/// ([`handler_id`] of its module and name), so that a description read from the handler's
/// extractors (aide, feature `aide`) finds the handler's `HandlerDoc`. Not an API.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct HandlerContext<const HANDLER: u64>(pub IdemContext);

impl<S: Send + Sync, const HANDLER: u64> FromRequestParts<S> for HandlerContext<HANDLER>
where
    Idem: FromRef<S>,
{
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        IdemContext::from_request_parts(parts, state)
            .await
            .map(HandlerContext)
    }
}

/// A handler's name as a number, for [`HandlerContext`]: FNV-1a (64 bits) of
/// `module::function`.
#[doc(hidden)]
pub const fn handler_id(module: &str, function: &str) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let parts = [module.as_bytes(), b"::", function.as_bytes()];
    let mut p = 0;
    while p < parts.len() {
        let bytes = parts[p];
        let mut i = 0;
        while i < bytes.len() {
            hash ^= bytes[i] as u64;
            hash = hash.wrapping_mul(PRIME);
            i += 1;
        }
        p += 1;
    }
    hash
}
