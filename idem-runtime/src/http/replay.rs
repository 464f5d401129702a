//! Replays built from a stored record as every HTTP front sends them: the exact replay (the
//! stored status, body and headers, less those never stored) and the replay of `suppress_only`
//! (the business number alone), both marked replayed. [`ReplayResponse`] is the framework's
//! part: building its response.

use super::snapshot::{never_stored, typed_biz_no};
use crate::engine::biz_no_body;
use crate::store::{Record, RecordState};

/// A framework's response, as a replay builds it.
pub(crate) trait ReplayResponse {
    /// The framework's header name (`http` 1.x's for axum, 0.2's for actix-web).
    type Name: for<'n> TryFrom<&'n str>;
    /// The framework's header value: made from the stored bytes without a copy.
    type Value: TryFrom<Vec<u8>>;

    /// A response of the stored `status` (`200` when there is none, or it is not a status code)
    /// and `body`.
    fn stored(status: Option<u16>, body: Vec<u8>) -> Self;
    /// A `200` response of the JSON `body`.
    fn json(body: Vec<u8>) -> Self;
    /// Appends a header.
    fn append(&mut self, name: Self::Name, value: Self::Value);
    /// Marks the response as a replay (`Idempotent-Replayed: true`).
    fn mark_replayed(&mut self);
}

/// The stored status, headers and body (`exact_replay`, and every stored failure). A stored
/// header never stored (`never_stored`), or that the framework refuses, is left out.
pub(crate) fn exact_replay<R: ReplayResponse>(record: Record) -> R {
    let mut resp = R::stored(record.status, record.body);
    for (name, value) in record.headers {
        if never_stored(&name) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (R::Name::try_from(&name), R::Value::try_from(value)) {
            resp.append(name, value);
        }
    }
    resp.mark_replayed();
    resp
}

/// `200` + `{"<field>": "<biz_no>"}` (`suppress_only`); a record without a business number (a
/// stored failure) is replayed exactly.
pub(crate) fn suppressed_replay<R: ReplayResponse>(record: Record, field: &str) -> R {
    match (&record.state, &record.biz_no) {
        (RecordState::Completed, Some(biz_no)) => {
            let typed = typed_biz_no(&record.body, field, biz_no);
            let mut resp = R::json(biz_no_body(field, typed));
            resp.mark_replayed();
            resp
        }
        _ => exact_replay(record),
    }
}
