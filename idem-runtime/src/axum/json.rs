//! [`Json`]: axum's JSON extractor, with `400` problem+json rejections instead of `422`.

use core::ops::{Deref, DerefMut};

use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::http::invalid_body;

/// A JSON request body (extractor) or response body, like `axum::Json`, except that a body that
/// does not deserialize is rejected with **`400`** `application/problem+json` (type
/// `https://docs.rs/idem/latest/idem/problem/index.html#invalid-body`) instead of axum's `422`.
///
/// On an idempotent endpoint `422` must mean one thing only: *this key was used with a different
/// request* (the IETF draft, section 2.7). axum's `Json` answers `422` for a body that parses but
/// does not fit the type, which a client could not tell apart from "key reused".
///
/// | rejection | status |
/// |---|---|
/// | missing or non-JSON `Content-Type` | `415` |
/// | syntax error, or data that does not fit `T` | `400` |
/// | body over the router's limit | `413` |
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use axum::{Router, routing::post, body::Body, http::Request};
/// use idem_runtime::axum::Json;
/// use tower::ServiceExt;
///
/// #[derive(serde::Deserialize, serde::Serialize)]
/// struct Transfer { amount: u64 }
/// async fn transfer(Json(t): Json<Transfer>) -> Json<Transfer> { Json(t) }
///
/// let app: Router = Router::new().route("/", post(transfer));
/// let resp = app.oneshot(Request::post("/").header("content-type", "application/json")
///     .body(Body::from(r#"{"amount":"lots"}"#)).unwrap()).await.unwrap();
/// assert_eq!(resp.status(), 400);
/// assert_eq!(resp.headers()["content-type"], "application/problem+json");
/// # });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct Json<T>(pub T);

impl<T> Deref for Json<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Json<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T> From<T> for Json<T> {
    fn from(value: T) -> Self {
        Json(value)
    }
}

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = JsonRejection;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let base = req
            .extensions()
            .get::<super::respond::ProblemBase>()
            .map(|b| b.0.clone());
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(rejection) => {
                let status = match rejection.status() {
                    StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
                    other => other,
                };
                Err(JsonRejection {
                    status,
                    detail: rejection.body_text(),
                    base,
                })
            }
        }
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// The rejection of [`Json`]: `400`, `413` or `415` as `application/problem+json`.
///
/// ```
/// use axum::response::IntoResponse;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use axum::extract::FromRequest;
/// let req = axum::http::Request::post("/").body(axum::body::Body::from("{}")).unwrap();
/// let rejection = idem_runtime::axum::Json::<u8>::from_request(req, &()).await.unwrap_err();
/// assert_eq!(rejection.status(), 415); // no content type
/// assert_eq!(rejection.into_response().headers()["content-type"], "application/problem+json");
/// # });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct JsonRejection {
    status: StatusCode,
    detail: String,
    /// The guarding handle's problem base, from the request's extensions.
    base: Option<std::sync::Arc<str>>,
}

impl JsonRejection {
    /// The response status: 400, 413 or 415.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use axum::extract::FromRequest;
    /// let req = axum::http::Request::post("/").header("content-type", "application/json")
    ///     .body(axum::body::Body::from("{")).unwrap();
    /// let rejection = idem_runtime::axum::Json::<u8>::from_request(req, &()).await.unwrap_err();
    /// assert_eq!(rejection.status(), 400);
    /// # });
    /// ```
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What was wrong with the body.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use axum::extract::FromRequest;
    /// let req = axum::http::Request::post("/").header("content-type", "application/json")
    ///     .body(axum::body::Body::from("true")).unwrap();
    /// let rejection = idem_runtime::axum::Json::<u8>::from_request(req, &()).await.unwrap_err();
    /// assert!(!rejection.detail().is_empty());
    /// # });
    /// ```
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl IntoResponse for JsonRejection {
    fn into_response(self) -> Response {
        let status = self.status.as_u16();
        invalid_body(status, &self.detail, self.base.as_deref()).into_response()
    }
}
