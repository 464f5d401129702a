//! Unit tests of the engine: problem documents, the default policy, contracts.

use core::time::Duration;

use super::problem::{self, Problem, retry_after_secs};
use super::*;
use crate::key::InvalidKey;

#[test]
fn problem_documents() {
    let cases: Vec<(IdempotencyError, u16, &str, Option<u64>)> = vec![
        (
            IdempotencyError::MissingKey {
                header: "Idempotency-Key".into(),
            },
            400,
            problem::MISSING_KEY,
            None,
        ),
        (InvalidKey::Empty.into(), 400, problem::INVALID_KEY, None),
        (
            IdempotencyError::KeyReused {
                idempotency_key: "k".into(),
                key_expires_at: None,
            },
            422,
            problem::KEY_REUSED,
            None,
        ),
        (
            IdempotencyError::InProgress {
                retry_after: Duration::from_millis(2500),
                waited: None,
            },
            409,
            problem::IN_PROGRESS,
            Some(3),
        ),
        (
            IdempotencyError::Unavailable {
                retry_after: Duration::ZERO,
            },
            503,
            problem::STORE_UNAVAILABLE,
            Some(1),
        ),
        (
            IdempotencyError::BodyTooLarge { limit: 10 },
            413,
            problem::BODY_TOO_LARGE,
            None,
        ),
    ];
    for (e, status, type_uri, retry) in cases {
        assert_eq!(e.status(), status);
        assert_ne!(e.status(), 429, "S9");
        assert_ne!(e.status(), 500, "S9");
        let json: serde_json::Value =
            serde_json::from_str(&e.problem(Some("k-1")).to_json()).unwrap();
        assert_eq!(json["type"], type_uri);
        assert!(type_uri.starts_with("https://docs.rs/idem/latest/idem/problem/index.html#"));
        assert_eq!(json["status"], status);
        assert!(json["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(json["detail"].as_str().is_some_and(|d| !d.is_empty()));
        assert_eq!(json["idempotency_key"], "k-1");
        assert_eq!(json["retry_after"].as_u64(), retry);
        assert_eq!(e.retry_after().map(|d| d.as_secs()), retry);
    }
}

/// `409` and `422` say what they know of the key's windows: how long the request waited for the
/// attempt in flight, until when the key stays bound to its first request; absent when unknown.
#[test]
fn problems_say_the_windows() {
    let waited = IdempotencyError::InProgress {
        retry_after: Duration::from_secs(1),
        waited: Some(Duration::from_millis(1500)),
    };
    let p = waited.problem(None);
    assert_eq!(p.get("waited"), Some(&serde_json::Value::from(1.5)));
    assert!(waited.to_string().contains("waited 1.5 s"), "{waited}");
    let not_waiting = IdempotencyError::InProgress {
        retry_after: Duration::from_secs(1),
        waited: None,
    };
    assert_eq!(not_waiting.problem(None).get("waited"), None);

    let at = crate::store::Timestamp::from_millis(1_700_000_000_123);
    let reused = IdempotencyError::KeyReused {
        idempotency_key: "k".into(),
        key_expires_at: Some(at),
    };
    assert_eq!(
        reused.problem(None).get("key_expires_at"),
        Some(&serde_json::Value::from("2023-11-14T22:13:20.123Z"))
    );
    let in_flight = IdempotencyError::KeyReused {
        idempotency_key: "k".into(),
        key_expires_at: None,
    };
    assert_eq!(in_flight.problem(None).get("key_expires_at"), None);
}

#[test]
fn fingerprint_problem_names_kind_and_path() {
    let err = crate::json::canonicalize_slice(
        br#"{"a":"1O0"}"#,
        &crate::json::Spec::new().field("a", crate::json::ValueSpec::Decimal),
    )
    .unwrap_err();
    let e = IdempotencyError::from(err);
    assert_eq!(e.status(), 400);
    let p = e.problem(None);
    assert_eq!(p.get("type").unwrap(), problem::REQUEST_NOT_FINGERPRINTABLE);
    assert_eq!(p.get("error").unwrap(), "invalid_number");
    assert_eq!(p.get("path").unwrap(), "$.a");
    assert!(p.get("idempotency_key").is_none());
    // The message says what happened, once; the detail adds the cause: which value, and why.
    assert_eq!(e.to_string(), "the request cannot be fingerprinted");
    let detail = p.get("detail").unwrap().as_str().unwrap();
    assert!(
        detail.starts_with(
            "the request cannot be fingerprinted: at `$.a`: `1O0` is not a decimal number"
        ),
        "{detail}"
    );
}

#[test]
fn snapshot_problem_carries_the_cause_once() {
    let cause = serde_json::from_str::<u8>("\"x\"").unwrap_err();
    let text = cause.to_string();
    let e = IdempotencyError::from(cause);
    assert!(!e.to_string().contains(&text), "{e}");
    let detail = e
        .problem(None)
        .get("detail")
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(detail.matches(&text).count(), 1, "{detail}");
}

#[test]
fn problem_member_order_and_replacement() {
    let p = Problem::new("about:blank", "t", 400, "d")
        .extension("x", 1)
        .extension("x", 2);
    assert_eq!(
        p.to_json(),
        r#"{"type":"about:blank","title":"t","status":400,"detail":"d","x":2}"#
    );
}

#[test]
fn retry_after_rounds_up_to_whole_seconds() {
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1000)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
    assert_eq!(retry_after_secs(Duration::from_secs(30)), 30);
}

#[test]
fn default_policy_table() {
    use Contract::*;
    use Disposition::*;
    let p = DefaultPolicy;
    for status in [200, 201, 202, 204, 303] {
        for c in [ExactReplay, LatestState, SuppressOnly] {
            assert_eq!(p.classify(c, status), Store, "{status} {c}");
        }
    }
    for status in [400, 401, 403, 404, 422, 408, 409, 425, 429] {
        for c in [ExactReplay, LatestState, SuppressOnly] {
            assert_eq!(p.classify(c, status), Release, "{status} {c}");
        }
    }
    for status in [402, 405, 410, 451] {
        assert_eq!(p.classify(ExactReplay, status), StoreAsFailure, "{status}");
        assert_eq!(p.classify(LatestState, status), Release, "{status}");
        assert_eq!(p.classify(SuppressOnly, status), Release, "{status}");
    }
    // A server error may come after part of the work: the retry continues the operation.
    for status in [500, 502, 503, 504, 600] {
        assert_eq!(p.classify(ExactReplay, status), StoreAsFailure, "{status}");
        assert_eq!(p.classify(LatestState, status), Abandon, "{status}");
        assert_eq!(p.classify(SuppressOnly, status), Abandon, "{status}");
    }
    for c in [ExactReplay, LatestState, SuppressOnly] {
        assert_eq!(p.classify(c, 100), Abandon, "{c}");
    }
}

#[test]
fn contract_names() {
    assert_eq!(Contract::ExactReplay.to_string(), "exact_replay");
    assert_eq!(Contract::LatestState.to_string(), "latest_state");
    assert_eq!(Contract::SuppressOnly.to_string(), "suppress_only");
}
