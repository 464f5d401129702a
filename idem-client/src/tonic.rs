//! tonic clients: one `idempotency-key` per call, retried by the same [`RetryPolicy`].

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use tonic::Code;
use tonic_types::StatusExt as _;
use tower::{Service, ServiceExt as _};

#[cfg(test)]
use crate::IDEMPOTENCY_KEY;
use crate::middleware::key_of;
use crate::policy::{Verdict, is_replayed};
use crate::{Delivery, RetryPolicy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What idem's tonic front says of a call past the TTL of a remembered key
/// (`FAILED_PRECONDITION`, `ErrorInfo` reason `KEY_EXPIRED`, domain `idem.rs`): the operation
/// ran, its stored answer expired, and the server remembers the key, so the call must not be
/// sent again as it is. The layer never retries it (`FAILED_PRECONDITION` is final); read it
/// with [`key_expired`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrpcKeyExpired {
    /// The business number the operation stored, if the server knows it.
    pub biz_no: Option<String>,
    /// The operation's stable id.
    pub operation_id: Option<String>,
    /// The HTTP form of the stored answer's status (`200` for `OK`).
    pub response_status: Option<u16>,
    /// When the answer was stored (RFC 3339).
    pub completed_at: Option<String>,
    /// When the stored answer expired, the end of the TTL (RFC 3339).
    pub expired_at: Option<String>,
    /// Until when the server remembers the key (RFC 3339); after it the key is new.
    pub remember_until: Option<String>,
}

/// The [`GrpcKeyExpired`] of `status`, when it is idem's `KEY_EXPIRED` answer.
///
/// ```
/// use std::collections::HashMap;
/// use tonic_types::{ErrorDetails, StatusExt};
/// let mut details = ErrorDetails::new();
/// let metadata = HashMap::from([("biz_no".to_owned(), "pay_7".to_owned())]);
/// details.set_error_info("KEY_EXPIRED", "idem.rs", metadata);
/// let status = tonic::Status::with_error_details(tonic::Code::FailedPrecondition, "expired", details);
/// let expired = idem_client::tonic::key_expired(&status).unwrap();
/// assert_eq!(expired.biz_no.as_deref(), Some("pay_7"));
/// assert!(idem_client::tonic::key_expired(&tonic::Status::not_found("no")).is_none());
/// ```
pub fn key_expired(status: &tonic::Status) -> Option<GrpcKeyExpired> {
    if status.code() != Code::FailedPrecondition {
        return None;
    }
    let info = status.get_details_error_info()?;
    if info.reason != "KEY_EXPIRED" || info.domain != "idem.rs" {
        return None;
    }
    let text = |name: &str| info.metadata.get(name).cloned();
    Some(GrpcKeyExpired {
        biz_no: text("biz_no"),
        operation_id: text("operation_id"),
        response_status: text("response_status").and_then(|s| s.parse().ok()),
        completed_at: text("completed_at"),
        expired_at: text("expired_at"),
        remember_until: text("remember_until"),
    })
}

/// A tower layer for a tonic client's channel: every call through it gets an
/// `idempotency-key` (a random UUID, unless the caller set one in the request's metadata),
/// keeps it for its retries, and is retried as idem's tonic front asks:
///
/// | answer | verdict |
/// |---|---|
/// | a transport error (connection refused, reset) | retry (backoff) |
/// | `UNAVAILABLE` (the store is down, or a proxy) | retry after `google.rpc.RetryInfo`'s delay, else backoff |
/// | `ABORTED` with `RetryInfo` (the first call still runs) | retry after the delay |
/// | `RESOURCE_EXHAUSTED` with `RetryInfo` | retry after the delay |
/// | metadata `idempotent-replayed: true` | final: the stored answer |
/// | any other status, any message | final |
///
/// The request message is buffered (unary calls: one message) so that it can be sent again,
/// and the answer is read in full before it is returned, so that a connection broken in the
/// middle of the message is one more attempt with the same key. A status after a message (in
/// the trailers) is classified like one in the head. The response's extensions hold a
/// [`Delivery`]. For unary calls only: a streaming call through the layer would be buffered
/// whole.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_client::{RetryPolicy, tonic::GrpcIdempotencyLayer};
///
/// let channel = tonic::transport::Channel::from_static("http://127.0.0.1:50051").connect().await?;
/// let channel = tower::ServiceBuilder::new()
///     .layer(GrpcIdempotencyLayer::new(RetryPolicy::default()))
///     .service(channel);
/// // let mut client = PaymentsClient::new(channel);
/// # let _ = channel;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct GrpcIdempotencyLayer {
    policy: RetryPolicy,
}

impl GrpcIdempotencyLayer {
    /// The layer with `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        GrpcIdempotencyLayer { policy }
    }
}

impl<S> tower::Layer<S> for GrpcIdempotencyLayer {
    type Service = GrpcIdempotency<S>;

    fn layer(&self, inner: S) -> GrpcIdempotency<S> {
        GrpcIdempotency {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// The service [`GrpcIdempotencyLayer`] makes.
#[derive(Debug, Clone)]
pub struct GrpcIdempotency<S> {
    inner: S,
    policy: RetryPolicy,
}

/// The retry classification of a gRPC answer's head (a trailers-only answer carries its status
/// there; a message's status comes after it, in the trailers).
pub fn classify_grpc(headers: &http::HeaderMap) -> Verdict {
    classify_answer(headers, None)
}

/// The retry classification of an answer read in full: the status in its head, else the one
/// in its trailers.
fn classify_answer(head: &http::HeaderMap, trailers: Option<&http::HeaderMap>) -> Verdict {
    if is_replayed(head) {
        return Verdict::Final;
    }
    let status = tonic::Status::from_header_map(head)
        .or_else(|| trailers.and_then(tonic::Status::from_header_map));
    let Some(status) = status else {
        return Verdict::Final;
    };
    let retry_after = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay);
    match status.code() {
        Code::Unavailable => Verdict::Retry { retry_after },
        Code::Aborted | Code::ResourceExhausted if retry_after.is_some() => {
            Verdict::Retry { retry_after }
        }
        _ => Verdict::Final,
    }
}

/// An answer read in full: its message bytes and its trailers, sent on as a body again.
struct Buffered {
    data: Option<Bytes>,
    trailers: Option<http::HeaderMap>,
}

impl http_body::Body for Buffered {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let frame = match self.data.take() {
            Some(data) => Some(http_body::Frame::data(data)),
            None => self.trailers.take().map(http_body::Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

impl<S, B> Service<http::Request<tonic::body::Body>> for GrpcIdempotency<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // The service that was polled ready serves the first attempt; a clone the rest.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let policy = self.policy.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let key = key_of(&mut parts.headers);
            let message = body.collect().await.map_err(BoxError::from)?.to_bytes();
            let started = Instant::now();
            let mut attempts = 0u32;
            loop {
                attempts += 1;
                if attempts > 1 {
                    inner = inner.ready_oneshot().await.map_err(Into::into)?;
                }
                let attempt = http::Request::from_parts(
                    parts.clone(),
                    tonic::body::Body::new(Full::new(message.clone())),
                );
                let result = match inner.call(attempt).await.map_err(Into::into) {
                    // The answer is read here, so that a connection broken in the middle of
                    // the message is one more attempt (the retry gets the stored answer), not
                    // the caller's error.
                    Ok(response) => {
                        let (head, body) = response.into_parts();
                        match body.collect().await {
                            Ok(collected) => Ok((head, collected)),
                            Err(e) => Err(e.into()),
                        }
                    }
                    Err(e) => Err(e),
                };
                let verdict = match &result {
                    Ok((head, collected)) => classify_answer(&head.headers, collected.trailers()),
                    Err(_) => Verdict::Retry { retry_after: None },
                };
                if let Verdict::Retry { retry_after } = verdict
                    && let Some(wait) = policy.next_wait(attempts, started, retry_after)
                {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                let (mut head, collected) = result?;
                head.extensions.insert(Delivery {
                    key: key.to_str().ok().map(str::to_owned),
                    attempts,
                    replayed: is_replayed(&head.headers),
                });
                let trailers = collected.trailers().cloned();
                let body = Buffered {
                    data: Some(collected.to_bytes()).filter(|d| !d.is_empty()),
                    trailers,
                };
                return Ok(http::Response::from_parts(
                    head,
                    tonic::body::Body::new(body),
                ));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use http::HeaderValue;
    use tonic_types::{ErrorDetails, StatusExt as _};

    use super::*;

    /// Half a message, then the connection is gone.
    struct Broken(bool);

    impl http_body::Body for Broken {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            if std::mem::replace(&mut self.0, true) {
                return Poll::Ready(Some(Err(std::io::ErrorKind::ConnectionReset.into())));
            }
            Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
                b"\0\0\0",
            )))))
        }
    }

    #[tokio::test]
    async fn a_message_cut_in_the_middle_is_retried_with_the_same_key() {
        let keys = Arc::new(Mutex::new(Vec::new()));
        let seen = keys.clone();
        let stub = tower::service_fn(move |request: http::Request<tonic::body::Body>| {
            let seen = seen.clone();
            async move {
                let mut keys = seen.lock().unwrap();
                keys.push(request.headers()[IDEMPOTENCY_KEY].clone());
                let body = if keys.len() == 1 {
                    tonic::body::Body::new(Broken(false))
                } else {
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_static("0"));
                    tonic::body::Body::new(Buffered {
                        data: Some(Bytes::from_static(b"message")),
                        trailers: Some(trailers),
                    })
                };
                let mut response = http::Response::new(body);
                response
                    .headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
                Ok::<_, BoxError>(response)
            }
        });
        let policy =
            RetryPolicy::default().backoff(Duration::from_millis(1), Duration::from_millis(2));
        let mut layered = tower::Layer::layer(&GrpcIdempotencyLayer::new(policy), stub);
        let request = http::Request::new(tonic::body::Body::new(Full::new(Bytes::from_static(
            b"req",
        ))));
        let response = layered.ready().await.unwrap().call(request).await.unwrap();
        let delivery = response.extensions().get::<Delivery>().unwrap().clone();
        assert_eq!(delivery.attempts, 2);
        assert!(delivery.replayed);
        let keys = keys.lock().unwrap().clone();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0], keys[1]);
        assert_eq!(delivery.key.as_deref(), Some(keys[0].to_str().unwrap()));
        let collected = response.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
        assert_eq!(collected.to_bytes(), Bytes::from_static(b"message"));
    }

    #[tokio::test]
    async fn a_status_in_the_trailers_is_classified_too() {
        let calls = Arc::new(Mutex::new(0));
        let count = calls.clone();
        let stub = tower::service_fn(move |_: http::Request<tonic::body::Body>| {
            *count.lock().unwrap() += 1;
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("14"));
            let body = tonic::body::Body::new(Buffered {
                data: None,
                trailers: Some(trailers),
            });
            async move { Ok::<_, BoxError>(http::Response::new(body)) }
        });
        let policy = RetryPolicy::default()
            .max_attempts(3)
            .backoff(Duration::from_millis(1), Duration::from_millis(2));
        let mut layered = tower::Layer::layer(&GrpcIdempotencyLayer::new(policy), stub);
        let request = http::Request::new(tonic::body::Body::empty());
        let response = layered.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(
            *calls.lock().unwrap(),
            3,
            "UNAVAILABLE in the trailers is retried"
        );
        assert_eq!(response.extensions().get::<Delivery>().unwrap().attempts, 3);
    }

    fn verdict(code: Code, retry: Option<Duration>, replayed: bool) -> Verdict {
        let status = match retry {
            Some(delay) => tonic::Status::with_error_details(
                code,
                "m",
                ErrorDetails::with_retry_info(Some(delay)),
            ),
            None => tonic::Status::new(code, "m"),
        };
        let mut headers = http::HeaderMap::new();
        status.add_header(&mut headers).unwrap();
        if replayed {
            headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
        classify_grpc(&headers)
    }

    #[test]
    fn the_classification_table_code_by_code() {
        let second = Some(Duration::from_secs(1));
        let retry = |after| Verdict::Retry { retry_after: after };
        assert_eq!(verdict(Code::Unavailable, None, false), retry(None));
        assert_eq!(verdict(Code::Unavailable, second, false), retry(second));
        assert_eq!(verdict(Code::Aborted, second, false), retry(second));
        assert_eq!(verdict(Code::Aborted, None, false), Verdict::Final);
        assert_eq!(
            verdict(Code::ResourceExhausted, second, false),
            retry(second)
        );
        assert_eq!(
            verdict(Code::ResourceExhausted, None, false),
            Verdict::Final
        );
        for code in [
            Code::Ok,
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::Internal,
            Code::Unknown,
            Code::DeadlineExceeded,
        ] {
            assert_eq!(verdict(code, second, false), Verdict::Final, "{code:?}");
        }
        // A stored answer is final whatever its code.
        assert_eq!(verdict(Code::Unavailable, second, true), Verdict::Final);
        // A message (no status in the head) is final.
        assert_eq!(classify_grpc(&http::HeaderMap::new()), Verdict::Final);
    }
}
