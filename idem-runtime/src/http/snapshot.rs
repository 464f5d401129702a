//! The rules of a response snapshot every HTTP front follows: the header whitelist (and the
//! headers never stored), the business number a store can keep (S11), and a body over the size
//! limit kept as its key fields (S12).

use super::headers::IDEMPOTENT_SNAPSHOT;
use crate::engine::{Settlement, key_fields_body};
pub(crate) use crate::engine::{never_stored, storable};
use crate::store::{Completion, Outcome};

/// Headers stored by default: what a client needs to read the body (`content-type`,
/// `content-encoding`: a compression layer inside idem's gives it compressed bytes) and where
/// the created resource is.
pub(crate) const ALWAYS_STORED: &[&str] = &["content-type", "content-encoding", "location"];

/// The whitelisted headers of a response: `content-type`, `content-encoding`, `location` and `extra`, minus
/// the headers never stored (`engine::snapshot::NEVER_STORED`).
/// Each front passes its own header map as `(name, value)` pairs (names in lowercase).
pub(crate) fn snapshot_headers<'a, H: AsRef<str>>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    extra: &[H],
) -> Vec<(String, Vec<u8>)> {
    headers
        .into_iter()
        .filter(|(name, _)| {
            !never_stored(name)
                && (ALWAYS_STORED.contains(name)
                    || extra.iter().any(|e| e.as_ref().eq_ignore_ascii_case(name)))
        })
        .map(|(name, value)| (name.to_owned(), value.to_vec()))
        .collect()
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
    /// handler did not give one (the middlewares).
    pub biz_no_from_body: bool,
    /// The key fields a body over the limit keeps besides the business number (S12).
    pub key_fields: Vec<(&'static str, serde_json::Value)>,
}

/// The snapshot of one fresh response being taken: its outcome, status and whitelisted
/// headers, under `rules`; what becomes of its body is the front's to read, the record's to
/// decide here.
pub(crate) struct Snapshotting<'r, 'a, H> {
    pub rules: &'r SnapshotRules<'a, H>,
    pub outcome: Outcome,
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl<H> Snapshotting<'_, '_, H> {
    /// The business number of a body (or of its first bytes) read by a middleware.
    pub(crate) fn biz_no_in_body(&self, bytes: &[u8]) -> Option<String> {
        if self.rules.biz_no_from_body {
            biz_no_in_json(bytes, self.rules.biz_no_field)
        } else {
            None
        }
    }

    /// The body stored whole: `bytes` within the limit, or over it with no business number to
    /// rebuild it from (stored whole rather than degraded to a bare "ok", S12).
    pub(crate) fn whole(self, bytes: &[u8], biz_no: Option<String>) -> Settlement {
        let biz_no = biz_no.or_else(|| self.biz_no_in_body(bytes));
        if bytes.len() > self.rules.limit
            && let Some(biz_no) = biz_no
        {
            return self.truncated(biz_no, bytes);
        }
        self.store(bytes.to_vec(), biz_no)
    }

    /// A body over the limit, stored as the business number and the key fields (S12), marked
    /// `Idempotent-Snapshot: truncated`. The business number keeps the JSON type it has in
    /// `read`, the part of the body read (`{"id": 42}` stays a number).
    pub(crate) fn truncated(mut self, biz_no: String, read: &[u8]) -> Settlement {
        let typed = typed_biz_no(read, self.rules.biz_no_field, &biz_no);
        let body = key_fields_body(self.rules.biz_no_field, typed, &self.rules.key_fields);
        self.headers = truncated_headers(core::mem::take(&mut self.headers));
        self.store(body, Some(biz_no))
    }

    fn store(self, body: Vec<u8>, biz_no: Option<String>) -> Settlement {
        Settlement::Store(Completion {
            outcome: self.outcome,
            status: self.status,
            headers: self.headers,
            body,
            biz_no,
            expire_at: None,
        })
    }
}

/// The headers of a truncated snapshot: JSON content type, no content encoding (the stored body
/// is idem's own JSON), and the marker header.
pub(crate) fn truncated_headers(mut headers: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    headers.retain(|(n, _)| n != "content-type" && n != "content-encoding");
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
    biz_no_member(body, field)
        .as_ref()
        .map(member_text)
        .and_then(storable)
}

/// The member `field` of a JSON object `body` (or of its start), a string or a number, as
/// written.
fn biz_no_member(body: &[u8], field: &str) -> Option<serde_json::Value> {
    use serde::Deserializer as _;
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    // Ends in an error of its own once the member is read (the rest may not have arrived), at
    // the cut, or at malformed JSON: `found` says whether the member came first.
    let _ = (&mut de).deserialize_map(FindMember {
        field,
        found: &mut found,
    });
    found
}

/// The text of a business number member: a string as it is, a number as serde_json prints it.
fn member_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `biz_no` with the JSON type the first answer gave it: the member `field` of the JSON object
/// `body` when it reads as `biz_no` (`{"id": 42}` rebuilds as `42`, not `"42"`, which a typed
/// client could not read), a JSON string otherwise (no such member, a body that is no JSON —
/// compressed, say — or another value).
pub(crate) fn typed_biz_no(body: &[u8], field: &str, biz_no: &str) -> serde_json::Value {
    match biz_no_member(body, field) {
        Some(member) if member_text(&member) == biz_no => member,
        _ => serde_json::Value::String(biz_no.to_owned()),
    }
}

/// Looks for the member `field` among the members of a JSON object.
struct FindMember<'a> {
    field: &'a str,
    found: &'a mut Option<serde_json::Value>,
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
                s @ serde_json::Value::String(_) => Some(s),
                // A number ends where the input does, which may be a cut through its digits:
                // trusted only once what follows it (the next name, or the object's end) is read.
                n @ serde_json::Value::Number(_) => {
                    map.next_key::<serde::de::IgnoredAny>().ok().map(|_| n)
                }
                _ => None,
            };
            return Err(serde::de::Error::custom("the business number is read"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{biz_no_in_json, truncated_headers, typed_biz_no};

    #[test]
    fn a_truncated_snapshot_is_plain_json() {
        let headers = vec![
            ("content-type".to_owned(), b"text/csv".to_vec()),
            ("content-encoding".to_owned(), b"gzip".to_vec()),
            ("location".to_owned(), b"/p/1".to_vec()),
        ];
        let names: Vec<String> = truncated_headers(headers)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["location", "content-type", "idempotent-snapshot"]);
    }

    #[test]
    fn a_rebuilt_business_number_keeps_its_json_type() {
        use serde_json::json;
        assert_eq!(typed_biz_no(br#"{"id":42,"a":1}"#, "id", "42"), json!(42));
        assert_eq!(typed_biz_no(br#"{"id":"42"}"#, "id", "42"), json!("42"));
        assert_eq!(typed_biz_no(br#"{"id":1.50}"#, "id", "1.5"), json!(1.5));
        // Another value, no member, or no JSON: a string.
        assert_eq!(typed_biz_no(br#"{"id":7}"#, "id", "42"), json!("42"));
        assert_eq!(typed_biz_no(br#"{"x":42}"#, "id", "42"), json!("42"));
        assert_eq!(typed_biz_no(b"\x1f\x8b\x08", "id", "42"), json!("42"));
    }

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
        let longest = format!(r#"{{"id":"{}"}}"#, "r".repeat(16_384));
        assert_eq!(
            biz_no_in_json(longest.as_bytes(), "id").map(|b| b.len()),
            Some(16_384)
        );
        let over = format!(r#"{{"id":"{}é"}}"#, "r".repeat(16_383));
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
