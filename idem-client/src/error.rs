//! Typed results: [`Sent`] for an answer the caller can use, [`Error`] for everything else, and
//! the [`Delivery`] both carry. Below the middleware and the gRPC layer, which build them.

use std::fmt;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};

use crate::policy::{Verdict, classify};

/// How a response came about, in its extensions (`response.extensions().get::<Delivery>()`),
/// and in [`Sent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The key every attempt carried; `None` for a method the middleware leaves alone.
    pub key: Option<String>,
    /// Attempts made, the one that got this response included.
    pub attempts: u32,
    /// The response carries `Idempotent-Replayed: true`: the server's stored answer.
    pub replayed: bool,
}

/// A problem details object (RFC 9457, `application/problem+json`), as idem's servers answer
/// refusals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problem {
    /// `type`: the URI naming the problem (`about:blank` when absent).
    pub kind: String,
    /// `title`.
    pub title: Option<String>,
    /// `status`.
    pub status: Option<u16>,
    /// `detail`.
    pub detail: Option<String>,
    /// The answer's `Retry-After`, parsed.
    pub retry_after: Option<Duration>,
}

impl Problem {
    /// The problem in `body`, if it is a JSON object; `retry_after` comes from the headers.
    pub fn parse(body: &[u8], headers: &HeaderMap) -> Option<Problem> {
        let serde_json::Value::Object(object) = serde_json::from_slice(body).ok()? else {
            return None;
        };
        let text = |name: &str| object.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        Some(Problem {
            kind: text("type").unwrap_or_else(|| "about:blank".to_owned()),
            title: text("title"),
            status: object
                .get("status")
                .and_then(|v| v.as_u64())
                .and_then(|s| u16::try_from(s).ok()),
            detail: text("detail"),
            retry_after: headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| crate::parse_retry_after(v, SystemTime::now())),
        })
    }
}

/// What a `410 key-expired` answer says of the operation the key named: it ran, its stored
/// response expired with the endpoint's TTL, and the server remembers the key (`remember`), so
/// the request must not be sent again as it is. Look the result up by its business number; a
/// new operation needs a new key.
#[derive(Debug, Clone)]
pub struct KeyExpired {
    /// `biz_no`: the business number the operation stored, if the server knows it.
    pub biz_no: Option<String>,
    /// `operation_id`: the operation's stable id.
    pub operation_id: Option<String>,
    /// `response_status`: the status of the response that expired.
    pub response_status: Option<u16>,
    /// `completed_at`, `expired_at`, `remember_until`: RFC 3339 times, as the server wrote them.
    pub completed_at: Option<String>,
    /// When the stored response expired (the end of the TTL).
    pub expired_at: Option<String>,
    /// Until when the server remembers the key; after it the key is new.
    pub remember_until: Option<String>,
    /// The answer itself.
    pub failure: Failure,
}

impl KeyExpired {
    /// The members of a `key-expired` problem in `failure`'s body.
    fn of(failure: Failure) -> Self {
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&failure.body).unwrap_or_default();
        let text = |name: &str| object.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        KeyExpired {
            biz_no: text("biz_no"),
            operation_id: text("operation_id"),
            response_status: object
                .get("response_status")
                .and_then(|v| v.as_u64())
                .and_then(|s| u16::try_from(s).ok()),
            completed_at: text("completed_at"),
            expired_at: text("expired_at"),
            remember_until: text("remember_until"),
            failure,
        }
    }
}

impl fmt::Display for KeyExpired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.failure)?;
        if let Some(biz_no) = &self.biz_no {
            write!(f, " (business number {biz_no})")?;
        }
        Ok(())
    }
}

/// Whether `failure` is idem's `410 key-expired` (its problem type ends with `key-expired`,
/// under idem's base or a service's own).
fn is_key_expired(failure: &Failure) -> bool {
    failure.status == StatusCode::GONE
        && !failure.delivery.replayed
        && failure
            .problem
            .as_ref()
            .is_some_and(|p| p.kind.ends_with("key-expired"))
}

/// A final answer with an error status (`4xx`, `5xx`), read in full.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, as text (lossy).
    pub body: String,
    /// The body parsed as problem details, when it is one.
    pub problem: Option<Problem>,
    /// How the answer came about.
    pub delivery: Delivery,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.status)?;
        if let Some(p) = &self.problem {
            write!(f, " {}", p.kind)?;
            if let Some(detail) = p.detail.as_ref().or(p.title.as_ref()) {
                write!(f, ": {detail}")?;
            }
        }
        if self.delivery.replayed {
            f.write_str(" (replayed)")?;
        }
        Ok(())
    }
}

/// What went wrong after the retries the policy allowed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `422`: the key was already used with another request. A bug in the caller: a key names
    /// one logical operation, and a changed request is another operation that needs a new key
    /// (or the original request, unchanged, to get its answer). Never retried.
    #[error("the idempotency key was used for another request: {0}")]
    KeyReused(Box<Failure>),
    /// `410 key-expired`: the operation ran, its stored response expired with the server's TTL,
    /// and the server remembers the key (`remember`): sending the request again would not run
    /// it either. Never retried; the [`KeyExpired`] carries the business number to look the
    /// result up by.
    #[error("the operation of this idempotency key ran and its response expired: {0}")]
    KeyExpired(Box<KeyExpired>),
    /// Any other final error answer: a `4xx` that a retry would only repeat, or a stored
    /// failure replayed (`Idempotent-Replayed: true`).
    #[error("the server refused the request: {0}")]
    Refused(Box<Failure>),
    /// The retries ran out — on a retryable answer (`409`, `429`, `5xx`) or a transport error
    /// — or the request could not be sent again (a streaming body): the operation's outcome is
    /// unknown; a later retry **with the same key** learns it.
    ///
    /// A request whose method is outside the middleware's set (a `GET`, by default) passes
    /// through with no key and no retry; a retryable answer to it (`409`, `429`, `5xx`) is a
    /// `GaveUp` too, after 1 attempt and with [`key`](GaveUp::key) `None`.
    #[error(transparent)]
    GaveUp(GaveUp),
    /// A transport error that is not retried (an invalid URL, another middleware's refusal)
    /// before a key was attached; a request sent with a key gives up with
    /// [`Error::GaveUp`] instead, which carries it.
    #[error(transparent)]
    Transport(reqwest_middleware::Error),
}

impl Error {
    /// The key the operation was sent with, if known: reuse it to learn the outcome later.
    pub fn key(&self) -> Option<&str> {
        match self {
            Error::KeyReused(f) | Error::Refused(f) => f.delivery.key.as_deref(),
            Error::KeyExpired(e) => e.failure.delivery.key.as_deref(),
            Error::GaveUp(g) => g.key.as_deref(),
            Error::Transport(_) => None,
        }
    }

    /// Attempts made.
    pub fn attempts(&self) -> u32 {
        match self {
            Error::KeyReused(f) | Error::Refused(f) => f.delivery.attempts,
            Error::KeyExpired(e) => e.failure.delivery.attempts,
            Error::GaveUp(g) => g.attempts,
            Error::Transport(_) => 1,
        }
    }

    /// The final answer's problem details, if there was an answer and it was one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::KeyReused(f) | Error::Refused(f) => f.problem.as_ref(),
            Error::KeyExpired(e) => e.failure.problem.as_ref(),
            Error::GaveUp(GaveUp {
                last: LastAttempt::Answered(f),
                ..
            }) => f.problem.as_ref(),
            Error::GaveUp(_) | Error::Transport(_) => None,
        }
    }
}

/// No attempt follows the last — the retries ran out, or the body was a stream that cannot be
/// sent twice — and the last one did not settle the operation; it is the
/// [`source`](Self::last). The outcome is unknown: retry later with [`key`](Self::key) to
/// learn it.
#[derive(Debug, thiserror::Error)]
#[error("gave up after {attempts} attempts")]
pub struct GaveUp {
    /// Attempts made.
    pub attempts: u32,
    /// The key every attempt carried.
    pub key: Option<String>,
    /// How the last attempt ended.
    #[source]
    pub last: LastAttempt,
}

/// How the last attempt of a [`GaveUp`] ended.
#[derive(Debug, thiserror::Error)]
pub enum LastAttempt {
    /// With a retryable answer (`409`, `429`, `5xx`), read in full.
    #[error("the last answer was {0}")]
    Answered(Box<Failure>),
    /// With a transport error.
    #[error(transparent)]
    Failed(reqwest_middleware::Error),
}

/// A successful answer (`1xx`-`3xx`), first or replayed.
#[derive(Debug)]
pub struct Sent {
    /// The response; its body is already read, so reading it cannot fail on the network.
    pub response: reqwest::Response,
    /// How it came about.
    pub delivery: Delivery,
}

impl Sent {
    /// The status.
    pub fn status(&self) -> StatusCode {
        self.response.status()
    }

    /// Whether it is the server's stored answer (`Idempotent-Replayed: true`).
    pub fn replayed(&self) -> bool {
        self.delivery.replayed
    }

    /// Attempts made.
    pub fn attempts(&self) -> u32 {
        self.delivery.attempts
    }

    /// The key every attempt carried.
    pub fn key(&self) -> Option<&str> {
        self.delivery.key.as_deref()
    }
}

/// [`send_idempotent`](Self::send_idempotent) on reqwest-middleware's request builder.
pub trait SendIdempotent {
    /// Sends the request through the client's middleware (with [`Idempotency`](crate::Idempotency)
    /// among it: retries with one key) and types the final answer: [`Sent`] for a success,
    /// [`Error`] for the rest.
    fn send_idempotent(self) -> impl Future<Output = Result<Sent, Error>> + Send;
}

impl SendIdempotent for reqwest_middleware::RequestBuilder {
    async fn send_idempotent(self) -> Result<Sent, Error> {
        let response = match self.send().await {
            Ok(response) => response,
            Err(reqwest_middleware::Error::Middleware(e)) => {
                return Err(match e.downcast::<GaveUp>() {
                    Ok(gave_up) => Error::GaveUp(gave_up),
                    Err(e) => Error::Transport(reqwest_middleware::Error::Middleware(e)),
                });
            }
            Err(e) => return Err(Error::Transport(e)),
        };
        let delivery = response
            .extensions()
            .get::<Delivery>()
            .cloned()
            .unwrap_or_else(|| Delivery {
                key: None,
                attempts: 1,
                replayed: crate::policy::is_replayed(response.headers()),
            });
        let status = response.status();
        if !(status.is_client_error() || status.is_server_error()) {
            return Ok(Sent { response, delivery });
        }
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| Error::Transport(e.into()))?;
        let failure = Box::new(Failure {
            status,
            problem: Problem::parse(&body, &headers),
            body: String::from_utf8_lossy(&body).into_owned(),
            headers,
            delivery,
        });
        Err(
            if status == StatusCode::UNPROCESSABLE_ENTITY && !failure.delivery.replayed {
                Error::KeyReused(failure)
            } else if is_key_expired(&failure) {
                Error::KeyExpired(Box::new(KeyExpired::of(*failure)))
            } else if classify(status, &failure.headers, SystemTime::now()) == Verdict::Final {
                Error::Refused(failure)
            } else {
                Error::GaveUp(GaveUp {
                    attempts: failure.delivery.attempts,
                    key: failure.delivery.key.clone(),
                    last: LastAttempt::Answered(failure),
                })
            },
        )
    }
}
