//! Building responses: problem documents, the responses of replays (which `http::replay` builds),
//! and the snapshot of a fresh response (header whitelist, size limit, outcome).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, StatusCode};

use super::body::{Captured, capture, concat, read_rest, rejoin};
use crate::engine::problem::{self, Problem};
use crate::engine::{Disposition, IdempotencyError, Settlement};
use crate::http::replay::ReplayResponse;
pub(crate) use crate::http::snapshot::SnapshotRules;
use crate::http::snapshot::{Snapshotting, snapshot_headers, storable};
use crate::http::{IDEMPOTENCY_STATUS, IDEMPOTENT_REPLAYED};

/// `application/problem+json` with the problem's status; a numeric `retry_after` member (whole
/// seconds) is also sent as the `Retry-After` header, so a client or proxy that reads only
/// headers waits as long as the body says.
///
/// ```
/// use axum::response::IntoResponse;
/// use idem_runtime::engine::problem::Problem;
/// let resp = Problem::new("https://example.com/problems/db-down", "Database unavailable", 503, "retry")
///     .extension("retry_after", 2)
///     .into_response();
/// assert_eq!(resp.status(), 503);
/// assert_eq!(resp.headers()["retry-after"], "2");
/// assert_eq!(resp.headers()["content-type"], "application/problem+json");
/// ```
impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let retry_after = self.get("retry_after").and_then(serde_json::Value::as_u64);
        let mut resp = (status, self.to_json()).into_response();
        resp.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(problem::CONTENT_TYPE),
        );
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// The problem response of `e`, with `Retry-After` for 409 and 503 (from the problem's
/// `retry_after` member).
pub(crate) fn problem_response(e: &IdempotencyError, client_key: Option<&str>) -> Response {
    e.problem(client_key).into_response()
}

/// `application/problem+json`, `Retry-After` on `409` and `503`; see `docs/http.md`.
///
/// ```
/// use idem_runtime::engine::IdempotencyError;
/// use axum::response::IntoResponse;
/// let resp = IdempotencyError::InProgress { retry_after: std::time::Duration::from_millis(1200), waited: None }
///     .into_response();
/// assert_eq!(resp.status(), 409);
/// assert_eq!(resp.headers()["retry-after"], "2");
/// assert_eq!(resp.headers()["content-type"], "application/problem+json");
/// ```
impl IntoResponse for IdempotencyError {
    fn into_response(self) -> Response {
        problem_response(&self, None)
    }
}

pub(crate) fn mark_unprotected(resp: &mut Response) {
    resp.headers_mut()
        .insert(IDEMPOTENCY_STATUS, HeaderValue::from_static("unprotected"));
}

/// The axum response of a replay.
impl ReplayResponse for Response {
    type Name = HeaderName;
    type Value = HeaderValue;

    fn stored(status: Option<u16>, body: Vec<u8>) -> Self {
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = status
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        resp
    }

    fn json(body: Vec<u8>) -> Self {
        let content_type = HeaderValue::from_static("application/json");
        ([(CONTENT_TYPE, content_type)], body).into_response()
    }

    fn append(&mut self, name: HeaderName, value: HeaderValue) {
        self.headers_mut().append(name, value);
    }

    fn mark_replayed(&mut self) {
        self.headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
}

/// What becomes of a fresh response's record according to `disposition`, and the response
/// returned to the first caller: its snapshot to store, a release (the operation never started),
/// or an abandon — also when the response body fails while it is read, since the handler ran.
/// Failing to store does not change the caller's answer (`docs/http.md`, "Completion
/// failures").
pub(crate) async fn settle<H: AsRef<str>>(
    disposition: Disposition,
    resp: Response,
    biz_no: Option<String>,
    rules: &SnapshotRules<'_, H>,
) -> (Settlement, Response) {
    let Some(outcome) = disposition.outcome() else {
        return (Settlement::without_result(disposition), resp);
    };
    let (parts, body) = resp.into_parts();
    let headers = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()));
    let snapshot = Snapshotting {
        rules,
        outcome,
        status: parts.status.as_u16(),
        headers: snapshot_headers(headers, rules.replay_headers),
    };
    let biz_no = biz_no.and_then(storable);
    // The layer reads the business number from the body: from its first bytes when it is over
    // the limit, so that a body whose number comes early is streamed like a handler's.
    let read_ahead = biz_no.is_none() && rules.biz_no_from_body;
    let whole = match capture(body, rules.limit, read_ahead).await {
        Captured::Whole(bytes) => {
            let settlement = snapshot.whole(&bytes, biz_no);
            return (settlement, Response::from_parts(parts, Body::from(bytes)));
        }
        Captured::Failed { prefix, error } => {
            let resp = Response::from_parts(parts, rejoin(prefix, None, Some(error)));
            return (Settlement::Abandon, resp);
        }
        Captured::Over { prefix, rest } => {
            // At most the limit and one chunk: the part already read.
            let read = concat(prefix.clone());
            let early = biz_no.or_else(|| read_ahead.then(|| snapshot.biz_no_in_body(&read))?);
            match early {
                Some(biz_no) => {
                    let resp = Response::from_parts(parts, rejoin(prefix, Some(rest), None));
                    return (snapshot.truncated(biz_no, &read), resp);
                }
                None => read_rest(prefix, rest).await,
            }
        }
    };
    // Over the limit and no business number known (nor, for the layer, in its first bytes): the
    // body was read whole.
    match whole {
        Ok(bytes) => (
            snapshot.whole(&bytes, None),
            Response::from_parts(parts, Body::from(bytes)),
        ),
        Err(Captured::Failed { prefix, error }) => {
            let resp = Response::from_parts(parts, rejoin(prefix, None, Some(error)));
            (Settlement::Abandon, resp)
        }
        Err(_) => (Settlement::Abandon, unreachable_response()),
    }
}

/// `read_rest` only fails with `Captured::Failed`.
fn unreachable_response() -> Response {
    StatusCode::BAD_GATEWAY.into_response()
}

/// The problem base of the handle ([`Idem::with_problem_base`](crate::engine::Idem::with_problem_base))
/// that guards a request, in its extensions, so that [`Json`]'s rejections use it too.
#[derive(Debug, Clone)]
pub(crate) struct ProblemBase(pub(crate) std::sync::Arc<str>);

impl ProblemBase {
    /// Puts `idem`'s problem base, if it has one, into `extensions`.
    pub(crate) fn insert(idem: &crate::engine::Idem, extensions: &mut http::Extensions) {
        if let Some(base) = idem.problem_base() {
            extensions.insert(ProblemBase(base.clone()));
        }
    }
}
