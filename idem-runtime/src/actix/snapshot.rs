//! [`IntoSnapshot`]: the response side of an idempotent actix-web handler.

use actix_web::http::StatusCode;
use actix_web::http::header::TryIntoHeaderPair;
use actix_web::{HttpRequest, HttpResponse, Responder, web};
use serde::Serialize;

use crate::engine::Snapshot;

/// The response side of an idempotent actix-web handler: its response and its business number
/// (S11).
///
/// Implemented for `web::Json<T>` of a [`Snapshot`] type `T`, alone, with a status
/// (`(web::Json<T>, StatusCode)`, actix's own shape), or with a status and headers
/// (`(web::Json<T>, StatusCode, [H; N])` where each `H` is a header pair such as
/// `(header::LOCATION, String)`), and for `Result<A, E>` where `A: IntoSnapshot` and `E` is an
/// actix error (`Problem`, `IdempotencyError`, any `ResponseError`: an `Err` has no business
/// number).
///
/// ```
/// use actix_web::{http::StatusCode, test::TestRequest, web};
/// use idem_runtime::actix::IntoSnapshot;
/// use idem_runtime::engine::{Snapshot, problem::Problem};
///
/// #[derive(serde::Serialize)]
/// struct Order { order_no: String }
/// impl Snapshot for Order {
///     const BIZ_NO_FIELD: &'static str = "order_no";
///     fn biz_no(&self) -> String { self.order_no.clone() }
/// }
///
/// let ok: Result<(web::Json<Order>, StatusCode), Problem> =
///     Ok((web::Json(Order { order_no: "o-1".into() }), StatusCode::CREATED));
/// assert_eq!(ok.biz_no().as_deref(), Some("o-1"));
/// let req = TestRequest::default().to_http_request();
/// assert_eq!(ok.into_response(&req).status(), 201);
/// ```
#[diagnostic::on_unimplemented(
    message = "the response type `{Self}` carries no business number (biz_no)",
    note = "a replay without the business number sends callers into an 'order again' branch (rule S11 of docs/contract.md in idem's repository): derive `idem::Snapshot` on the response body and mark the id field `#[snapshot(biz_no)]`, or implement `idem::actix::IntoSnapshot`",
    note = "supported shapes: `web::Json<T>`, `(web::Json<T>, StatusCode)`, `(web::Json<T>, StatusCode, [(HeaderName, V); N])`, and `Result<Shape, E: ResponseError>`"
)]
pub trait IntoSnapshot {
    /// The business number of this response; `None` for error responses.
    fn biz_no(&self) -> Option<String>;

    /// The wire name of the business number field, used for `suppress_only` replays and
    /// truncated snapshots.
    fn biz_no_field() -> &'static str;

    /// The key fields a snapshot over the size limit keeps besides the business number
    /// ([`Snapshot::key_fields`]); none for error responses.
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }

    /// The HTTP response.
    fn into_response(self, req: &HttpRequest) -> HttpResponse;
}

impl<T: Snapshot + Serialize> IntoSnapshot for web::Json<T> {
    fn biz_no(&self) -> Option<String> {
        Some(self.0.biz_no())
    }
    fn biz_no_field() -> &'static str {
        T::BIZ_NO_FIELD
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.0.key_fields()
    }
    fn into_response(self, req: &HttpRequest) -> HttpResponse {
        self.respond_to(req).map_into_boxed_body()
    }
}

impl<T: Snapshot + Serialize> IntoSnapshot for (web::Json<T>, StatusCode) {
    fn biz_no(&self) -> Option<String> {
        self.0.biz_no()
    }
    fn biz_no_field() -> &'static str {
        T::BIZ_NO_FIELD
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.0.key_fields()
    }
    fn into_response(self, req: &HttpRequest) -> HttpResponse {
        let mut resp = self.0.into_response(req);
        *resp.status_mut() = self.1;
        resp
    }
}

impl<T, H, const N: usize> IntoSnapshot for (web::Json<T>, StatusCode, [H; N])
where
    T: Snapshot + Serialize,
    H: TryIntoHeaderPair,
{
    fn biz_no(&self) -> Option<String> {
        self.0.biz_no()
    }
    fn biz_no_field() -> &'static str {
        T::BIZ_NO_FIELD
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.0.key_fields()
    }
    fn into_response(self, req: &HttpRequest) -> HttpResponse {
        let (body, status, headers) = self;
        let mut resp = (body, status).into_response(req);
        for header in headers {
            match header.try_into_pair() {
                Ok((name, value)) => {
                    resp.headers_mut().insert(name, value);
                }
                Err(e) => {
                    let e: actix_web::error::HttpError = e.into();
                    return actix_web::Error::from(e).error_response();
                }
            }
        }
        resp
    }
}

impl<A, E> IntoSnapshot for Result<A, E>
where
    A: IntoSnapshot,
    E: Into<actix_web::Error>,
{
    fn biz_no(&self) -> Option<String> {
        self.as_ref().ok().and_then(IntoSnapshot::biz_no)
    }
    fn biz_no_field() -> &'static str {
        A::biz_no_field()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.as_ref()
            .map(IntoSnapshot::key_fields)
            .unwrap_or_default()
    }
    fn into_response(self, req: &HttpRequest) -> HttpResponse {
        match self {
            Ok(ok) => ok.into_response(req),
            Err(e) => e.into().error_response(),
        }
    }
}
