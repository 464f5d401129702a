//! Decoding the replies of the store's scripts: integers, strings and the record's fields.
//!
//! The rule: a reply that does not read as the scripts write it is [`StoreError::Corrupt`],
//! naming the field; only what a record may lack (the response, the business number,
//! `completed_at`) reads as absent.

use redis::Value;

use crate::key::ScopedKey;
use crate::store::clock::Timestamp;
use crate::store::error::StoreError;
use crate::store::headers::decode_headers;
use crate::store::interface::{Record, RecordState};

/// The elements of an array reply.
pub(super) fn array(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

/// An integer reply (or a decimal string).
pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => core::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A UTF-8 string reply.
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// A binary string reply; `None` for a missing field.
pub(super) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        _ => None,
    }
}

/// Decodes `{now, idem_key, request_hash, state, operation_id, fence, resp_status,
/// resp_headers, resp_body, biz_no, locked_at, lease_until, expire_at, created_at, updated_at,
/// completed_at, replay_until}`: the record (`None` when the key holds none) and the script's "now".
pub(super) fn decode_record(
    key: &ScopedKey,
    items: &[Value],
) -> Result<(Option<Record>, Timestamp), StoreError> {
    let bad = |detail: String| StoreError::corrupt(Some(key), detail);
    if items.len() != 17 {
        return Err(bad(format!("{} fields instead of 17", items.len())));
    }
    let now = int(&items[0]).ok_or_else(|| bad("the script's clock".to_owned()))?;
    let now = Timestamp::from_millis(now);
    let f = &items[1..];
    if matches!(f[0], Value::Nil) && f.iter().all(|v| matches!(v, Value::Nil)) {
        return Ok((None, now));
    }
    let time = |i: usize, name: &str| {
        int(&f[i])
            .map(Timestamp::from_millis)
            .ok_or_else(|| bad(format!("{name}: missing or not a number")))
    };
    let key = text(&f[0]).ok_or_else(|| bad("idem_key".to_owned()))?;
    let request_hash = text(&f[1])
        .and_then(|h| h.parse().ok())
        .ok_or_else(|| bad("request_hash".to_owned()))?;
    let state = int(&f[2])
        .and_then(RecordState::from_code)
        .ok_or_else(|| bad("unknown state".to_owned()))?;
    let operation_id = text(&f[3]).ok_or_else(|| bad("operation_id".to_owned()))?;
    let fence = int(&f[4])
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad("fence".to_owned()))?;
    let status = match &f[5] {
        Value::Nil => None,
        v => Some(
            int(v)
                .and_then(|s| u16::try_from(s).ok())
                .filter(|s| (100..=999).contains(s))
                .ok_or_else(|| bad("response status".to_owned()))?,
        ),
    };
    let headers = match bytes(&f[6]) {
        None => Vec::new(),
        Some(h) => decode_headers(h).ok_or_else(|| bad("malformed headers".to_owned()))?,
    };
    if state != RecordState::Processing && status.is_none() {
        return Err(bad(format!("{state:?} without a response status")));
    }
    let biz_no = match &f[8] {
        Value::Nil => None,
        v => Some(text(v).ok_or_else(|| bad("biz_no".to_owned()))?),
    };
    let completed_at = match &f[14] {
        Value::Nil => None,
        _ => Some(time(14, "completed_at")?),
    };
    // Negative once the purge freed the response; a stale value (left by a build from before
    // `remember` that replaced the record) is not this record's.
    let replay_until = match &f[15] {
        Value::Nil => None,
        _ => crate::store::interface::valid_replay_until(
            Some(time(15, "replay_until")?.as_millis()),
            time(12, "created_at")?.as_millis(),
            time(11, "expire_at")?.as_millis(),
        ),
    };
    let record = Record {
        key,
        request_hash,
        state,
        operation_id,
        fence,
        status,
        headers,
        body: bytes(&f[7]).map(<[u8]>::to_vec).unwrap_or_default(),
        biz_no,
        locked_at: time(9, "locked_at")?,
        lease_until: time(10, "lease_until")?,
        expire_at: time(11, "expire_at")?,
        replay_until,
        created_at: time(12, "created_at")?,
        updated_at: time(13, "updated_at")?,
        completed_at,
    };
    Ok((Some(record), now))
}
