//! Building responses: problem documents, replays of every contract, and the snapshot of a fresh
//! response (header whitelist, size limit, outcome).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::body::{Captured, capture, concat, read_rest, rejoin};
use super::headers::{IDEMPOTENCY_STATUS, IDEMPOTENT_REPLAYED, IDEMPOTENT_SNAPSHOT};
use crate::engine::problem::{self, Problem};
use crate::engine::{
    Disposition, IdempotencyError, Settlement, biz_no_body, key_fields_body, never_stored, storable,
};
use crate::store::{Completion, Record, RecordState};

/// Headers stored by default.
const ALWAYS_STORED: &[&str] = &["content-type", "location"];

/// The whitelisted headers of a response: `content-type`, `location` and `extra`, minus
/// the headers never stored (`engine::snapshot::NEVER_STORED`).
pub(crate) fn snapshot_headers<H: AsRef<str>>(
    headers: &HeaderMap,
    extra: &[H],
) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            !never_stored(name)
                && (ALWAYS_STORED.contains(&name)
                    || extra.iter().any(|e| e.as_ref().eq_ignore_ascii_case(name)))
        })
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect()
}

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
/// let resp = IdempotencyError::InProgress { retry_after: std::time::Duration::from_millis(1200) }
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

pub(crate) fn mark_replayed(resp: &mut Response) {
    resp.headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
}

pub(crate) fn mark_unprotected(resp: &mut Response) {
    resp.headers_mut()
        .insert(IDEMPOTENCY_STATUS, HeaderValue::from_static("unprotected"));
}

/// The stored status, headers and body (`exact_replay`, and every stored failure).
pub(crate) fn exact_replay(record: Record) -> Response {
    let status = record
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut resp = Response::new(Body::from(record.body));
    *resp.status_mut() = status;
    for (name, value) in &record.headers {
        if never_stored(name) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    mark_replayed(&mut resp);
    resp
}

/// `200` + `{"<field>": "<biz_no>"}` (`suppress_only`); a record without a business number (a
/// stored failure) is replayed exactly.
pub(crate) fn suppressed_replay(record: Record, field: &str) -> Response {
    match (&record.state, &record.biz_no) {
        (RecordState::Completed, Some(biz_no)) => {
            let mut resp = (
                [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                biz_no_body(field, biz_no),
            )
                .into_response();
            mark_replayed(&mut resp);
            resp
        }
        _ => exact_replay(record),
    }
}

/// How a fresh response is snapshotted.
pub(crate) struct SnapshotRules<'a, H> {
    /// Extra whitelisted headers.
    pub replay_headers: &'a [H],
    /// Largest body stored whole.
    pub limit: usize,
    /// Wire name of the business number.
    pub biz_no_field: &'a str,
    /// Read the business number from this top-level member of a JSON response body when the
    /// handler did not give one (the tower layer).
    pub biz_no_from_body: bool,
    /// The key fields a body over the limit keeps besides the business number (S12).
    pub key_fields: Vec<(&'static str, serde_json::Value)>,
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
    let status = parts.status.as_u16();
    let headers = snapshot_headers(&parts.headers, rules.replay_headers);
    let biz_no = biz_no.and_then(storable);
    let store = |body: Vec<u8>, headers, biz_no: Option<String>| {
        Settlement::Store(Completion {
            outcome,
            status,
            headers,
            body,
            biz_no,
            expire_at: None,
        })
    };
    let from_body = |bytes: &Bytes| {
        if rules.biz_no_from_body {
            biz_no_in_json(bytes, rules.biz_no_field)
        } else {
            None
        }
    };
    // The layer reads the business number from the body: from its first bytes when it is over
    // the limit, so that a body whose number comes early is streamed like a handler's.
    let read_ahead = biz_no.is_none() && rules.biz_no_from_body;
    let whole = match capture(body, rules.limit, read_ahead).await {
        Captured::Whole(bytes) => {
            let biz_no = biz_no.or_else(|| from_body(&bytes));
            let settlement = store(bytes.to_vec(), headers, biz_no);
            return (settlement, Response::from_parts(parts, Body::from(bytes)));
        }
        Captured::Failed { prefix, error } => {
            let resp = Response::from_parts(parts, rejoin(prefix, None, Some(error)));
            return (Settlement::Abandon, resp);
        }
        Captured::Over { prefix, rest } => match biz_no.or_else(|| {
            // At most the limit and one chunk: the part already read.
            let read = read_ahead.then(|| concat(prefix.clone()))?;
            biz_no_in_json(&read, rules.biz_no_field)
        }) {
            Some(biz_no) => {
                let settlement = store(
                    key_fields_body(rules.biz_no_field, &biz_no, &rules.key_fields),
                    truncated_headers(headers),
                    Some(biz_no),
                );
                return (
                    settlement,
                    Response::from_parts(parts, rejoin(prefix, Some(rest), None)),
                );
            }
            None => read_rest(prefix, rest).await,
        },
    };
    // Over the limit and no business number known (nor, for the layer, in its first bytes): the
    // body was read whole.
    match whole {
        Ok(bytes) => {
            let settlement = match from_body(&bytes) {
                Some(biz_no) => store(
                    key_fields_body(rules.biz_no_field, &biz_no, &rules.key_fields),
                    truncated_headers(headers),
                    Some(biz_no),
                ),
                // No business number to rebuild it from: stored whole rather than degraded to a
                // bare "ok" (S12).
                None => store(bytes.to_vec(), headers, None),
            };
            (settlement, Response::from_parts(parts, Body::from(bytes)))
        }
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

/// The headers of a truncated snapshot: JSON content type, and the marker header.
fn truncated_headers(mut headers: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    headers.retain(|(n, _)| n != "content-type");
    headers.push(("content-type".to_owned(), b"application/json".to_vec()));
    headers.push((IDEMPOTENT_SNAPSHOT.to_owned(), b"truncated".to_vec()));
    headers
}

/// The top-level member `field` of a JSON object body, as text (strings as they are, numbers as
/// written; the first, if it occurs twice), read from the start of `body`, which may be only the
/// start of the response: the member is found as soon as its value has been read, whatever
/// follows. Nothing but that value is kept in memory (other members are skipped, not parsed into
/// a tree).
pub(crate) fn biz_no_in_json(body: &[u8], field: &str) -> Option<String> {
    use serde::Deserializer as _;
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    // Ends in an error of its own once the member is read (the rest may not have arrived), at
    // the cut, or at malformed JSON: `found` says whether the member came first.
    let _ = (&mut de).deserialize_map(FindMember {
        field,
        found: &mut found,
    });
    found.and_then(storable)
}

/// Looks for the member `field` among the members of a JSON object.
struct FindMember<'a> {
    field: &'a str,
    found: &'a mut Option<String>,
}

impl<'de> serde::de::Visitor<'de> for FindMember<'_> {
    type Value = ();

    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "a JSON object with a member `{}`", self.field)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            if name != self.field {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            *self.found = match map.next_value::<serde_json::Value>()? {
                serde_json::Value::String(s) => Some(s),
                // A number ends where the input does, which may be a cut through its digits:
                // trusted only once what follows it (the next name, or the object's end) is read.
                serde_json::Value::Number(n) => map
                    .next_key::<serde::de::IgnoredAny>()
                    .ok()
                    .map(|_| n.to_string()),
                _ => None,
            };
            return Err(serde::de::Error::custom("the business number is read"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::biz_no_in_json;

    #[test]
    fn business_number_of_a_json_body() {
        assert_eq!(
            biz_no_in_json(br#"{"id":"pay_1","a":[1]}"#, "id").as_deref(),
            Some("pay_1")
        );
        assert_eq!(
            biz_no_in_json(br#"{"a":{"id":"inner"},"id":7}"#, "id").as_deref(),
            Some("7")
        );
        assert_eq!(
            biz_no_in_json(br#"{"id":1.50}"#, "id").as_deref(),
            Some("1.5")
        );
        assert_eq!(
            biz_no_in_json(br#"{"id":"first","id":"second"}"#, "id").as_deref(),
            Some("first")
        );
        // What not every store can keep is no business number.
        assert_eq!(biz_no_in_json(br#"{"id":"a\u0000b"}"#, "id"), None);
        let longest = format!(r#"{{"id":"{}"}}"#, "r".repeat(65_535));
        assert_eq!(
            biz_no_in_json(longest.as_bytes(), "id").map(|b| b.len()),
            Some(65_535)
        );
        let over = format!(r#"{{"id":"{}é"}}"#, "r".repeat(65_534));
        assert_eq!(biz_no_in_json(over.as_bytes(), "id"), None);
        for none in [
            &br#"{"id":null}"#[..],
            br#"{"id":{"x":1}}"#,
            br#"["id"]"#,
            b"id",
            b"",
            br#"{"a":1}"#,
        ] {
            assert_eq!(
                biz_no_in_json(none, "id"),
                None,
                "{}",
                String::from_utf8_lossy(none)
            );
        }
    }

    #[test]
    fn the_start_of_a_body_is_enough() {
        // Cut anywhere after the member's value: found; before it ends: not.
        let body = br#"{"status":"ok","id":"exp_1","rows":["a","b","c"]}"#;
        let end_of_id = body.windows(7).position(|w| w == b"\"exp_1\"").unwrap() + 7;
        for cut in 0..body.len() {
            let expected = (cut >= end_of_id).then_some("exp_1");
            assert_eq!(
                biz_no_in_json(&body[..cut], "id").as_deref(),
                expected,
                "cut at {cut}"
            );
        }
        // A number may be cut through its digits: only trusted once what follows it is read.
        let body = br#"{"id":12345,"rows":[1,2]}"#;
        let after_next_name = body.windows(6).position(|w| w == b"\"rows\"").unwrap() + 6;
        for cut in 0..body.len() {
            let expected = (cut >= after_next_name).then_some("12345");
            assert_eq!(
                biz_no_in_json(&body[..cut], "id").as_deref(),
                expected,
                "cut at {cut}"
            );
        }
        assert_eq!(
            biz_no_in_json(br#"{"id":12345}"#, "id").as_deref(),
            Some("12345")
        );
    }
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
