//! Every idempotency condition as a gRPC status ([`status`]), and the correspondence of gRPC
//! codes and HTTP statuses the engine's outcome policy and the stored records use
//! ([`http_status_of_code`], [`code_of_status`]). The reasoning is in `docs/grpc.md`.

use std::collections::HashMap;

use tonic::Code;
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use super::IDEMPOTENCY_KEY;
use crate::engine::IdempotencyError;
use crate::store::Chain;

/// The `domain` of the `google.rpc.ErrorInfo` detail of every status idem answers.
pub const ERROR_DOMAIN: &str = "idem.rs";

/// The status of an idempotency condition: its code, its message (the same advice as the HTTP
/// problem's detail), and `google.rpc` details — `ErrorInfo` always (reason, domain
/// [`ERROR_DOMAIN`], the client's key when it was valid), `RetryInfo` with the delay when a
/// retry with the same key will be answered (`ABORTED` in flight, `UNAVAILABLE`), `BadRequest`
/// for an unusable key and `PreconditionFailure` for a key reused with another request.
///
/// | condition | code | details |
/// |---|---|---|
/// | no key, invalid key, request not fingerprintable, body too large | `INVALID_ARGUMENT` | `BadRequest` (key) |
/// | key reused with another request | `FAILED_PRECONDITION` | `PreconditionFailure`; metadata `key_expires_at` once the key's operation stored its answer |
/// | key remembered past its TTL (`remember`): the response expired, the operation ran | `FAILED_PRECONDITION` | `ErrorInfo` reason `KEY_EXPIRED`, metadata `biz_no`, `operation_id`, `response_status`, `completed_at`, `expired_at`, `remember_until` |
/// | a call with this key still in flight | `ABORTED` | `RetryInfo`; metadata `waited` (seconds) on a method that waits |
/// | store unavailable, handler timed out, stored result unreadable | `UNAVAILABLE` | `RetryInfo` |
/// | no identity to scope the key by | `UNAUTHENTICATED` | |
/// | server set up wrongly (not a condition of the request) | `INTERNAL` | |
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::engine::IdempotencyError;
/// use tonic_types::StatusExt;
///
/// let s = idem_runtime::tonic::status(
///     &IdempotencyError::InProgress { retry_after: Duration::from_millis(1500), waited: None },
///     Some("k-1"),
/// );
/// assert_eq!(s.code(), tonic::Code::Aborted);
/// assert_eq!(s.get_details_retry_info().unwrap().retry_delay, Some(Duration::from_secs(2)));
/// assert_eq!(s.get_details_error_info().unwrap().reason, "IN_PROGRESS");
/// ```
pub fn status(error: &IdempotencyError, client_key: Option<&str>) -> tonic::Status {
    let (code, reason) = match error {
        IdempotencyError::MissingKey { .. } => (Code::InvalidArgument, "MISSING_KEY"),
        IdempotencyError::InvalidKey(_) => (Code::InvalidArgument, "INVALID_KEY"),
        IdempotencyError::Fingerprint(_) => (Code::InvalidArgument, "REQUEST_NOT_FINGERPRINTABLE"),
        IdempotencyError::BodyTooLarge { .. } => (Code::InvalidArgument, "BODY_TOO_LARGE"),
        IdempotencyError::KeyReused { .. } => (Code::FailedPrecondition, "KEY_REUSED"),
        IdempotencyError::KeyExpired(_) => (Code::FailedPrecondition, "KEY_EXPIRED"),
        IdempotencyError::InProgress { .. } => (Code::Aborted, "IN_PROGRESS"),
        IdempotencyError::Unavailable { .. } => (Code::Unavailable, "STORE_UNAVAILABLE"),
        IdempotencyError::TimedOut { .. } => (Code::Unavailable, "TIMED_OUT"),
        IdempotencyError::Snapshot(_) => (Code::Unavailable, "SNAPSHOT_UNREADABLE"),
        IdempotencyError::Sealed(_) => (Code::Unavailable, "RECORD_SEALED"),
        IdempotencyError::Unscoped => (Code::Unauthenticated, "UNSCOPED"),
        IdempotencyError::Misconfigured { .. } => (Code::Internal, "MISCONFIGURED"),
    };
    let mut metadata = HashMap::new();
    if let Some(key) = client_key {
        metadata.insert("idempotency_key".to_owned(), key.to_owned());
    }
    let members: &[&str] = match error {
        IdempotencyError::KeyExpired(_) => &[
            "biz_no",
            "operation_id",
            "response_status",
            "completed_at",
            "expired_at",
            "remember_until",
        ],
        IdempotencyError::KeyReused { .. } => &["key_expires_at"],
        IdempotencyError::InProgress { .. } => &["waited"],
        _ => &[],
    };
    if !members.is_empty() {
        // The problem document's members, as `ErrorInfo` metadata (strings).
        let problem = error.problem(client_key);
        for &name in members {
            let value = match problem.get(name) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => continue,
            };
            metadata.insert(name.to_owned(), value);
        }
    }
    let mut details = ErrorDetails::new();
    details.set_error_info(reason, ERROR_DOMAIN, metadata);
    if let Some(delay) = error.retry_after() {
        details.set_retry_info(Some(delay));
    }
    match error {
        IdempotencyError::MissingKey { .. } | IdempotencyError::InvalidKey(_) => {
            details.set_bad_request(vec![FieldViolation::new(
                IDEMPOTENCY_KEY,
                error.to_string(),
            )]);
        }
        IdempotencyError::KeyReused {
            idempotency_key, ..
        } => {
            details.add_precondition_failure_violation(
                "IDEMPOTENCY_KEY",
                idempotency_key.clone(),
                "the key was first used for a request with another fingerprint",
            );
        }
        _ => {}
    }
    let mut status = tonic::Status::with_error_details(code, Chain(error).to_string(), details);
    if let Some(delay) = error.retry_after() {
        // For clients and proxies that read metadata only, as HTTP's `Retry-After`.
        status
            .metadata_mut()
            .insert("retry-after", delay.as_secs().into());
    }
    status
}

/// The HTTP status of a gRPC code, as `google/rpc/code.proto` documents it: what the engine's
/// [`OutcomePolicy`](crate::engine::OutcomePolicy) is asked about a method's `Status`, and what
/// its record stores.
///
/// ```
/// use idem_runtime::tonic::http_status_of_code;
/// assert_eq!(http_status_of_code(tonic::Code::Ok), 200);
/// assert_eq!(http_status_of_code(tonic::Code::InvalidArgument), 400);
/// assert_eq!(http_status_of_code(tonic::Code::Unavailable), 503);
/// ```
pub const fn http_status_of_code(code: Code) -> u16 {
    match code {
        Code::Ok => 200,
        Code::Cancelled => 499,
        Code::Unknown | Code::Internal | Code::DataLoss => 500,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
        Code::DeadlineExceeded => 504,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::PermissionDenied => 403,
        Code::Unauthenticated => 401,
        Code::ResourceExhausted => 429,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
    }
}

/// The gRPC code of an HTTP status, for the codes [`status`] does not name itself.
///
/// ```
/// use idem_runtime::tonic::code_of_status;
/// assert_eq!(code_of_status(422), tonic::Code::FailedPrecondition);
/// assert_eq!(code_of_status(503), tonic::Code::Unavailable);
/// ```
pub const fn code_of_status(status: u16) -> Code {
    match status {
        200..=299 => Code::Ok,
        400 | 413 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        409 => Code::Aborted,
        422 => Code::FailedPrecondition,
        429 => Code::ResourceExhausted,
        499 => Code::Cancelled,
        501 => Code::Unimplemented,
        503 => Code::Unavailable,
        504 => Code::DeadlineExceeded,
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::key::InvalidKey;

    /// Every idempotency condition has a code a client can act on: never `UNKNOWN`, and
    /// `INTERNAL` only for a server set up wrongly; the code agrees with the HTTP status.
    #[test]
    fn no_condition_is_unknown_or_internal() {
        let conditions = [
            IdempotencyError::MissingKey {
                header: "idempotency-key".into(),
            },
            IdempotencyError::InvalidKey(InvalidKey::Repeated),
            IdempotencyError::KeyReused {
                idempotency_key: "k".into(),
                key_expires_at: None,
            },
            IdempotencyError::InProgress {
                retry_after: Duration::from_secs(2),
                waited: None,
            },
            IdempotencyError::Unavailable {
                retry_after: Duration::from_secs(1),
            },
            IdempotencyError::BodyTooLarge { limit: 10 },
            IdempotencyError::TimedOut {
                after: Duration::from_secs(30),
            },
            IdempotencyError::Unscoped,
            IdempotencyError::Snapshot(<serde_json::Error as serde::de::Error>::custom("x")),
            IdempotencyError::Sealed(crate::seal::SealError::UnknownKey("k1".into())),
        ];
        for e in &conditions {
            let s = status(e, Some("k"));
            assert!(
                !matches!(s.code(), Code::Unknown | Code::Internal),
                "{e:?}: {:?}",
                s.code()
            );
            let info = s.get_details_error_info().expect("ErrorInfo");
            assert_eq!(info.domain, ERROR_DOMAIN);
            assert_eq!(
                s.get_details_retry_info().is_some(),
                e.retry_after().is_some(),
                "{e:?}"
            );
        }
        let misconfigured = IdempotencyError::Misconfigured { message: "fix it" };
        assert_eq!(status(&misconfigured, None).code(), Code::Internal);
    }

    /// The windows of the problem documents, as `ErrorInfo` metadata.
    #[test]
    fn windows_as_metadata() {
        let waited = IdempotencyError::InProgress {
            retry_after: Duration::from_secs(1),
            waited: Some(Duration::from_millis(250)),
        };
        let info = status(&waited, None).get_details_error_info().unwrap();
        assert_eq!(
            info.metadata.get("waited").map(String::as_str),
            Some("0.25")
        );
        let reused = IdempotencyError::KeyReused {
            idempotency_key: "k".into(),
            key_expires_at: Some(crate::store::Timestamp::from_millis(0)),
        };
        let info = status(&reused, None).get_details_error_info().unwrap();
        assert_eq!(
            info.metadata.get("key_expires_at").map(String::as_str),
            Some("1970-01-01T00:00:00.000Z")
        );
    }

    #[test]
    fn codes_and_statuses_round_trip() {
        for code in [
            Code::Ok,
            Code::InvalidArgument,
            Code::NotFound,
            Code::Aborted,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::ResourceExhausted,
            Code::Cancelled,
            Code::Unimplemented,
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Internal,
        ] {
            assert_eq!(code_of_status(http_status_of_code(code)), code, "{code:?}");
        }
    }
}
