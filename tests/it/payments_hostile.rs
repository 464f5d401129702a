//! Hostile input to the payments API, on both fronts (`front_tests!`): the cases of `hostile.rs`
//! that a black-box client can send — bodies over the limit, nesting deeper than the parser
//! goes, keys that are empty, too long or not UTF-8, bodies that are not UTF-8, members the
//! request does not know. Each is answered by a problem document and stores nothing, or (the
//! unknown member) is accepted and left out of the fingerprint.

use serde_json::json;

use super::{Server, create_payment, exchange, payment_body, post, send, stats};
use crate::servers::unique;

/// A `POST /v1/payments` head announcing `length` bytes of JSON, with `key` (raw bytes) as its
/// key; no body follows.
fn head(s: &Server, key: &[u8], length: usize) -> Vec<u8> {
    let mut req = format!(
        "POST /v1/payments HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\nIdempotency-Key: ",
        s.addr
    )
    .into_bytes();
    req.extend_from_slice(key);
    req.extend_from_slice(b"\r\n\r\n");
    req
}

/// A body announced as 10 MiB is refused from its `Content-Length` (actix's `JsonConfig`, 2 MB),
/// before a byte of it is read (none is sent) and before anything is claimed. The actix front
/// only: axum's `Json` reads the body up to its limit instead (`hostile.rs`, 10 MiB bodies).
#[cfg_attr(not(feature = "actix"), allow(dead_code))]
pub(super) async fn oversized_bodies_are_413_and_store_nothing(s: &Server) {
    let key = unique("big");
    let answer = exchange(s.addr, &head(s, key.as_bytes(), 10 << 20)).await;
    answer.assert_problem(413, "invalid-body");
    assert_eq!(stats(s).await["payments"], 0);
    // The key is free: the request the client meant goes through.
    let ok = create_payment(s, &key, json!("1.00")).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    assert!(!ok.replayed());
}

/// 10 000 nested arrays in `metadata` (a JSON map the request keeps): `400 invalid-body` (the
/// parser's depth limit), not a stack overflow, and nothing stored; the key stays free. (In a
/// member the request does not declare, the nesting is skipped unread: `hostile.rs`.)
pub(super) async fn deep_nesting_is_400_and_stores_nothing(s: &Server) {
    let key = unique("deep");
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let body = format!(
        r#"{{"amount":"1.00","currency":"EUR","customer_id":"c","order_id":"o","metadata":{{"a":{deep}}}}}"#
    );
    let answer = send(
        s.addr,
        "POST",
        "/v1/payments",
        &[("Idempotency-Key", &key)],
        Some(&body),
    )
    .await;
    answer.assert_problem(400, "invalid-body");
    assert_eq!(stats(s).await["payments"], 0);
    let ok = create_payment(s, &key, json!("1.00")).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    assert!(!ok.replayed());
}

/// Empty, blank, too long, repeated and malformed keys: `400 invalid-key`, nothing run.
pub(super) async fn invalid_keys_are_400(s: &Server) {
    let long = "k".repeat(1000);
    let body = payment_body(json!("1.00")).to_string();
    let cases: [&[(&str, &str)]; 5] = [
        &[("Idempotency-Key", "")],
        &[("Idempotency-Key", "   ")],
        &[("Idempotency-Key", &long)],
        &[("Idempotency-Key", "k-1"), ("Idempotency-Key", "k-2")],
        &[("Idempotency-Key", "\"unterminated")],
    ];
    for headers in cases {
        let answer = send(s.addr, "POST", "/v1/payments", headers, Some(&body)).await;
        answer.assert_problem(400, "invalid-key");
    }
    assert_eq!(stats(s).await["payments"], 0);
}

/// Bytes that are not UTF-8 in the key header (obs-text, which HTTP/1.1 parsers let through):
/// `400 invalid-key`, never a key made of replacement characters.
pub(super) async fn non_utf8_bytes_in_the_key_are_400(s: &Server) {
    let body = payment_body(json!("1.00")).to_string();
    for key in [&b"k-\xff\xfe"[..], b"\xc3\x28", b"caf\xe9"] {
        let mut req = head(s, key, body.len());
        req.extend_from_slice(body.as_bytes());
        let answer = exchange(s.addr, &req).await;
        answer.assert_problem(400, "invalid-key");
    }
    assert_eq!(stats(s).await["payments"], 0);
}

/// A body that is not UTF-8: `400 invalid-body`, nothing stored, the key free.
pub(super) async fn non_utf8_bodies_are_400_and_store_nothing(s: &Server) {
    let key = unique("bytes");
    let body =
        b"{\"amount\":\"1.00\",\"currency\":\"\xff\xfe\",\"customer_id\":\"c\",\"order_id\":\"o\"}";
    let mut req = head(s, key.as_bytes(), body.len());
    req.extend_from_slice(body);
    let answer = exchange(s.addr, &req).await;
    answer.assert_problem(400, "invalid-body");
    assert_eq!(stats(s).await["payments"], 0);
    let ok = create_payment(s, &key, json!("1.00")).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    assert!(!ok.replayed());
}

/// A member the request type does not declare is accepted and not hashed: the retry without it
/// is the same request (a replay), and one with another value too.
pub(super) async fn unknown_fields_are_not_hashed(s: &Server) {
    let key = unique("unknown");
    let mut body = payment_body(json!("1.00"));
    body["surprise"] = json!({"nested": [1, 2, 3]});
    let first = post(s, "/v1/payments", &key, body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let without = create_payment(s, &key, json!("1.00")).await;
    assert!(without.replayed(), "the unknown member was hashed");
    assert_eq!(without.body, first.body);
    body["surprise"] = json!("other");
    let other = post(s, "/v1/payments", &key, body).await;
    assert!(other.replayed());
    assert_eq!(stats(s).await["payments"], 1);
}
