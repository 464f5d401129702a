//! [`IdemContext`], the extractor `#[idempotent]` adds to an actix-web handler.

use core::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, ResponseError, web};
use http::HeaderValue;

use crate::engine::{Idem, IdempotencyError};
use crate::http::RequestHead;

/// What an idempotent actix-web handler needs from its request besides its own arguments: the
/// [`Idem`] handle (from the `web::Data<Idem>` app data), the request head (headers, method,
/// path, matched pattern) in `http` 1.x types, and the request itself. `#[idempotent]` adds it
/// as the first parameter of the handler.
///
/// Its one rejection is a handle missing from the app data: `500` problem+json (and an error
/// log) saying to register it with `App::new().app_data(web::Data::new(idem))`. A missing or
/// invalid key is answered by the generated handler, after the handler's own extractors ran.
///
/// ```
/// use actix_web::{App, HttpResponse, test, web};
/// use idem_runtime::actix::IdemContext;
/// use idem_runtime::engine::Idem;
///
/// async fn handler(cx: IdemContext) -> HttpResponse {
///     HttpResponse::Ok().body(cx.route_operation())
/// }
/// # actix_web::rt::System::new().block_on(async {
/// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
/// let app = test::init_service(
///     App::new()
///         .app_data(web::Data::new(idem))
///         .route("/v1/payments/{id}/refunds", web::post().to(handler)),
/// ).await;
/// let req = test::TestRequest::post().uri("/v1/payments/pay_1/refunds").to_request();
/// let body = test::call_and_read_body(&app, req).await;
/// assert_eq!(body, "POST /v1/payments/{id}/refunds");
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct IdemContext {
    idem: Idem,
    pub(crate) head: RequestHead,
    req: HttpRequest,
}

impl IdemContext {
    /// The context of `req` guarded by `idem`.
    ///
    /// ```
    /// use idem_runtime::{actix::IdemContext, engine::Idem};
    /// let req = actix_web::test::TestRequest::post().uri("/payments")
    ///     .insert_header(("idempotency-key", "k")).to_http_request();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &req);
    /// assert_eq!(cx.path(), "/payments");
    /// assert_eq!(cx.header("Idempotency-Key").unwrap(), "k");
    /// ```
    pub fn new(idem: Idem, req: &HttpRequest) -> Self {
        let head = RequestHead::from_parts(&idem, parts_of(req), req.match_pattern());
        IdemContext {
            idem,
            head,
            req: req.clone(),
        }
    }

    /// A request header (case-insensitive name), as an `http` 1.x value.
    ///
    /// ```
    /// # use idem_runtime::{actix::IdemContext, engine::Idem};
    /// let req = actix_web::test::TestRequest::post().insert_header(("x-tenant", "acme")).to_http_request();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &req);
    /// assert_eq!(cx.header("X-Tenant").unwrap(), "acme");
    /// assert!(cx.header("x-user").is_none());
    /// ```
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.head.header(name)
    }

    /// The [`Idem`] handle.
    ///
    /// ```
    /// # use idem_runtime::{actix::IdemContext, engine::Idem};
    /// # let req = actix_web::test::TestRequest::post().to_http_request();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &req);
    /// assert_eq!(cx.idem().max_snapshot_bytes(), 256 * 1024);
    /// ```
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// The request (actix's own handle: its extensions, app data, peer address).
    ///
    /// ```
    /// # use idem_runtime::{actix::IdemContext, engine::Idem};
    /// # let req = actix_web::test::TestRequest::post().uri("/a").to_http_request();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &req);
    /// assert_eq!(cx.request().path(), "/a");
    /// ```
    pub fn request(&self) -> &HttpRequest {
        &self.req
    }

    /// The request path.
    ///
    /// ```
    /// # use idem_runtime::{actix::IdemContext, engine::Idem};
    /// # let req = actix_web::test::TestRequest::post().uri("/a/b?c=d").to_http_request();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &req);
    /// assert_eq!(cx.path(), "/a/b");
    /// ```
    pub fn path(&self) -> &str {
        self.head.path()
    }

    /// The matched resource pattern (`/v1/payments/{id}/refunds`), when the request was routed.
    ///
    /// ```
    /// # use idem_runtime::{actix::IdemContext, engine::Idem};
    /// # let req = actix_web::test::TestRequest::post().uri("/a").to_http_request();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &req);
    /// assert_eq!(cx.route(), None); // not routed
    /// ```
    pub fn route(&self) -> Option<&str> {
        self.head.route.as_deref()
    }

    /// The operation name of a handler without `operation = ".."`: the method and the matched
    /// pattern (`POST /v1/payments/{id}/refunds`), as axum's; unrouted, the method and the path.
    ///
    /// ```
    /// # use idem_runtime::{actix::IdemContext, engine::Idem};
    /// # let req = actix_web::test::TestRequest::post().uri("/a/b?c=d").to_http_request();
    /// let cx = IdemContext::new(Idem::new(idem_runtime::store::MemoryStore::new()), &req);
    /// assert_eq!(cx.route_operation(), "POST /a/b");
    /// ```
    pub fn route_operation(&self) -> String {
        self.head.route_operation()
    }

    /// The scope parts of the handle's default scope ([`Idem::with_default_scope`], computed
    /// from the request's method, URI and headers: actix's typed extensions are not `http`'s)
    /// for this request: what `scope = default` uses.
    ///
    /// # Errors
    /// [`IdempotencyError::Unscoped`] (`401`) when the request carries no identity to scope by;
    /// [`IdempotencyError::Misconfigured`] (`500`, also logged) when the handle has no default
    /// scope.
    ///
    /// ```
    /// # use idem_runtime::{actix::IdemContext, engine::Idem};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new())
    ///     .with_default_scope(|parts| parts.headers.get("x-gateway-tenant")?.to_str().ok().map(|t| vec![t.to_owned()]));
    /// let req = actix_web::test::TestRequest::post().insert_header(("x-gateway-tenant", "acme")).to_http_request();
    /// assert_eq!(IdemContext::new(idem.clone(), &req).default_scope().unwrap(), ["acme"]);
    /// let anonymous = actix_web::test::TestRequest::post().to_http_request();
    /// assert_eq!(IdemContext::new(idem, &anonymous).default_scope().unwrap_err().status(), 401);
    /// ```
    pub fn default_scope(&self) -> Result<Vec<String>, IdempotencyError> {
        self.head.default_scope()
    }
}

/// The head of an actix request in `http` 1.x types (actix-web 4 is on `http` 0.2): what
/// [`Idem::with_default_scope`] reads. Extensions stay empty.
pub(crate) fn parts_of(req: &HttpRequest) -> http::request::Parts {
    let mut builder = http::Request::builder()
        .method(req.method().as_str())
        .uri(req.uri().to_string());
    if let Some(headers) = builder.headers_mut() {
        for (name, value) in req.headers() {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_str().as_bytes()),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                headers.append(name, value);
            }
        }
    }
    let (parts, ()) = builder
        .body(())
        .unwrap_or_else(|_| http::Request::new(()))
        .into_parts();
    parts
}

/// The handle of the app data, or the `500` that says how to register it.
pub(crate) fn idem_of(req: &HttpRequest) -> Result<Idem, actix_web::Error> {
    match req.app_data::<web::Data<Idem>>() {
        Some(idem) => Ok(Idem::clone(idem)),
        None => {
            tracing::error!(
                target: "idem",
                method = %req.method(),
                path = %req.path(),
                "an idempotent actix-web handler runs without the `Idem` handle in its app data: \
                 register it with `App::new().app_data(web::Data::new(idem))`; answering 500"
            );
            let e = IdempotencyError::Misconfigured {
                message: "the `Idem` handle is not in the app data: register it with `App::new().app_data(web::Data::new(idem))`",
            };
            Err(actix_web::error::InternalError::from_response(
                "no `web::Data<Idem>` in the app data",
                e.error_response(),
            )
            .into())
        }
    }
}

impl FromRequest for IdemContext {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(idem_of(req).map(|idem| IdemContext::new(idem, req)))
    }
}
