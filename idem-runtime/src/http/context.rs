//! [`IdemContext`] (the extractor `#[idempotent]` adds) and [`KeySource`].

use core::convert::Infallible;

use axum::extract::{FromRef, FromRequestParts};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method};

use crate::engine::{
    Idem, IdempotencyError, InvalidKey, ScopePart, parse_header_key, scoped_key, validate_key,
};
use crate::store::ScopedKey;

/// What an idempotent axum handler needs from its request besides its own arguments: the
/// [`Idem`] handle (from the router state, through `FromRef`), the request headers, method and
/// path. `#[idempotent]` adds it as the first parameter of the handler.
///
/// It never rejects: a missing or invalid key is answered by [`run`](super::run) with a problem
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
    path: String,
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
            idem,
            headers: parts.headers.clone(),
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
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
    /// assert_eq!(cx.idem().snapshot_limit(), 256 * 1024);
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
        &self.path
    }

    /// The client key of `source` and its scoped form.
    pub(crate) fn key(
        &self,
        source: KeySource<'_>,
        operation: &str,
        scope: &[&dyn ScopePart],
    ) -> Result<(ScopedKey, String), IdempotencyError> {
        let client = match source {
            KeySource::Header(name) => header_key(&self.headers, name)?,
            KeySource::Value(value) => {
                validate_key(value)?;
                value.to_owned()
            }
        };
        let scoped = scoped_key(operation, scope, &client)?;
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
        Ok(IdemContext::new(Idem::from_ref(state), parts))
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
    /// ([`validate_key`](crate::engine::validate_key)).
    Value(&'a str),
}
