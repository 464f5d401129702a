//! actix-web responses: problem documents, the responses of replays (which `http::replay` builds),
//! the snapshot of a fresh response, and the JSON extractor's rejections as problems.

use actix_web::body::BoxBody;
use actix_web::error::JsonPayloadError;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};

use super::body::{Captured, capture, read_rest, rejoin};
use crate::engine::problem::{self, Problem};
use crate::engine::{Disposition, Idem, IdempotencyError, Settlement};
use crate::http::invalid_body;
use crate::http::replay::ReplayResponse;
use crate::http::snapshot::{SnapshotRules, Snapshotting, snapshot_headers, storable};
use crate::http::{IDEMPOTENCY_STATUS, IDEMPOTENT_REPLAYED};

/// `application/problem+json` with the problem's status; a numeric `retry_after` member is also
/// sent as the `Retry-After` header. A `Problem` is an actix error: `Result<T, Problem>` is a
/// handler's return type.
///
/// ```
/// use actix_web::ResponseError;
/// use idem_runtime::engine::problem::Problem;
/// let p = Problem::new("https://example.com/problems/db-down", "Database unavailable", 503, "retry")
///     .extension("retry_after", 2);
/// let resp = p.error_response();
/// assert_eq!(resp.status(), 503);
/// assert_eq!(resp.headers().get("retry-after").unwrap(), "2");
/// assert_eq!(resp.headers().get("content-type").unwrap(), "application/problem+json");
/// ```
impl ResponseError for Problem {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status()).unwrap_or(StatusCode::BAD_REQUEST)
    }

    fn error_response(&self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status_code());
        resp.insert_header((CONTENT_TYPE, problem::CONTENT_TYPE));
        if let Some(secs) = self.get("retry_after").and_then(serde_json::Value::as_u64) {
            resp.insert_header((RETRY_AFTER, secs));
        }
        resp.body(self.to_json())
    }
}

/// The problem document of `e` (without a problem base): `409` and `503` with `Retry-After`.
///
/// ```
/// use actix_web::ResponseError;
/// use idem_runtime::engine::IdempotencyError;
/// let e = IdempotencyError::InProgress { retry_after: std::time::Duration::from_millis(1200), waited: None };
/// let resp = e.error_response();
/// assert_eq!(resp.status(), 409);
/// assert_eq!(resp.headers().get("retry-after").unwrap(), "2");
/// ```
impl ResponseError for IdempotencyError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status()).unwrap_or(StatusCode::BAD_REQUEST)
    }

    fn error_response(&self) -> HttpResponse {
        self.problem(None).error_response()
    }
}

/// The problem of `e` as `idem` sends it (its problem base applied).
pub(crate) fn problem_response(
    idem: &Idem,
    e: &IdempotencyError,
    client_key: Option<&str>,
) -> HttpResponse {
    idem.problem(e, client_key).error_response()
}

/// A `web::JsonConfig` whose rejections are problem documents of type `invalid-body` (under the
/// handle's problem base, read from the `web::Data<Idem>` app data): `400` for a body that does
/// not parse or does not fit the type — never a status a client could read as "key reused" —
/// `413` over the limit, `415` without a JSON content type. Register it as app data.
///
/// ```
/// use actix_web::{App, web, test};
/// # actix_web::rt::System::new().block_on(async {
/// #[derive(serde::Deserialize)]
/// struct Transfer { amount: u64 }
/// async fn transfer(body: web::Json<Transfer>) -> String { body.amount.to_string() }
///
/// let app = test::init_service(
///     App::new()
///         .app_data(idem_runtime::actix::json_config())
///         .route("/", web::post().to(transfer)),
/// ).await;
/// let req = test::TestRequest::post().uri("/")
///     .insert_header(("content-type", "application/json"))
///     .set_payload(r#"{"amount":"lots"}"#).to_request();
/// let resp = test::call_service(&app, req).await;
/// assert_eq!(resp.status(), 400);
/// assert_eq!(resp.headers().get("content-type").unwrap(), "application/problem+json");
/// # });
/// ```
pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default().error_handler(json_error)
}

/// The error handler of [`json_config`], for a `web::JsonConfig` of your own (its limit, its
/// content types): `JsonConfig::default().limit(64 * 1024).error_handler(json_error)`.
///
/// ```
/// use actix_web::{ResponseError, error::JsonPayloadError, test::TestRequest};
/// let req = TestRequest::default().to_http_request();
/// let error = idem_runtime::actix::json_error(JsonPayloadError::ContentType, &req);
/// assert_eq!(error.as_response_error().status_code(), 415);
/// ```
pub fn json_error(error: JsonPayloadError, req: &HttpRequest) -> actix_web::Error {
    let status = match &error {
        JsonPayloadError::ContentType => 415,
        JsonPayloadError::Overflow { .. } | JsonPayloadError::OverflowKnownLength { .. } => 413,
        _ => 400,
    };
    let base = req
        .app_data::<web::Data<Idem>>()
        .and_then(|idem| idem.problem_base().cloned());
    invalid_body(status, &error.to_string(), base.as_deref()).into()
}

pub(crate) fn mark_unprotected(resp: &mut HttpResponse) {
    resp.headers_mut().insert(
        HeaderName::from_static(IDEMPOTENCY_STATUS),
        HeaderValue::from_static("unprotected"),
    );
}

/// The actix-web response of a replay.
impl ReplayResponse for HttpResponse {
    type Name = HeaderName;
    type Value = HeaderValue;

    fn stored(status: Option<u16>, body: Vec<u8>) -> Self {
        let status = status
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        HttpResponse::with_body(status, BoxBody::new(body))
    }

    fn json(body: Vec<u8>) -> Self {
        HttpResponse::Ok()
            .content_type("application/json")
            .body(body)
    }

    fn append(&mut self, name: HeaderName, value: HeaderValue) {
        self.headers_mut().append(name, value);
    }

    fn mark_replayed(&mut self) {
        let name = HeaderName::from_static(IDEMPOTENT_REPLAYED);
        self.headers_mut()
            .insert(name, HeaderValue::from_static("true"));
    }
}

/// What becomes of a fresh response's record according to `disposition`, and the response
/// returned to the first caller (as the axum front's `settle`: the snapshot to store, a
/// release, or an abandon when the body fails while it is read).
pub(crate) async fn settle<H: AsRef<str>>(
    disposition: Disposition,
    resp: HttpResponse,
    biz_no: Option<String>,
    rules: &SnapshotRules<'_, H>,
) -> (Settlement, HttpResponse) {
    let Some(outcome) = disposition.outcome() else {
        return (Settlement::without_result(disposition), resp);
    };
    let (head, body) = resp.into_parts();
    let headers = head
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()));
    let snapshot = Snapshotting {
        rules,
        outcome,
        status: head.status().as_u16(),
        headers: snapshot_headers(headers, rules.replay_headers),
    };
    let biz_no = biz_no.and_then(storable);
    let read_ahead = biz_no.is_none() && rules.biz_no_from_body;
    let (settlement, body) = match capture(body, rules.limit, read_ahead).await {
        Captured::Whole(bytes) => (snapshot.whole(&bytes, biz_no), BoxBody::new(bytes)),
        Captured::Failed { prefix, error } => {
            (Settlement::Abandon, rejoin(prefix, None, Some(error)))
        }
        Captured::Over { prefix, rest } => {
            let read = prefix.concat();
            let early = biz_no.or_else(|| read_ahead.then(|| snapshot.biz_no_in_body(&read))?);
            match early {
                Some(biz_no) => (
                    snapshot.truncated(biz_no, &read),
                    rejoin(prefix, Some(rest), None),
                ),
                None => match read_rest(prefix, rest).await {
                    Ok(bytes) => (snapshot.whole(&bytes, None), BoxBody::new(bytes)),
                    Err(Captured::Failed { prefix, error }) => {
                        (Settlement::Abandon, rejoin(prefix, None, Some(error)))
                    }
                    Err(_) => unreachable!("`read_rest` only fails with `Captured::Failed`"),
                },
            }
        }
    };
    (settlement, head.set_body(body))
}
