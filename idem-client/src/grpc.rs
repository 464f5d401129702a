//! tonic clients: one `idempotency-key` per call, retried by the same [`RetryPolicy`].

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::HeaderValue;
use http_body_util::{BodyExt as _, Full};
use tonic::Code;
use tonic_types::StatusExt as _;
use tower::{Service, ServiceExt as _};

use crate::policy::{Verdict, is_replayed};
use crate::{Delivery, RetryPolicy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The metadata entry that carries the key (the same name as the HTTP header).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

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
/// The request message is buffered (unary calls: one message) so that it can be sent again.
/// A failure in the middle of the answer's body reaches the caller as the call's error: retry
/// the call (the layer gives it a new key unless you set one — set it to the first call's key,
/// [`Delivery::key`], to learn the outcome). The response's extensions hold a [`Delivery`].
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_client::{RetryPolicy, grpc::GrpcIdempotencyLayer};
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
/// there; a message's status comes after it, and the message is final anyway).
pub fn classify_grpc(headers: &http::HeaderMap) -> Verdict {
    if is_replayed(headers) {
        return Verdict::Final;
    }
    let Some(status) = tonic::Status::from_header_map(headers) else {
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

impl<S, B> Service<http::Request<tonic::body::Body>> for GrpcIdempotency<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = http::Response<B>;
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
            let key = match parts.headers.get(IDEMPOTENCY_KEY) {
                Some(key) => key.clone(),
                None => {
                    let key = HeaderValue::try_from(uuid::Uuid::new_v4().to_string())
                        .expect("a UUID is a valid metadata value");
                    parts.headers.insert(IDEMPOTENCY_KEY, key.clone());
                    key
                }
            };
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
                let result = inner.call(attempt).await.map_err(Into::into);
                let wait: Duration = match &result {
                    Ok(response) => match classify_grpc(response.headers()) {
                        Verdict::Final => Duration::MAX,
                        Verdict::Retry { retry_after } => {
                            policy.delay(attempts, retry_after, crate::middleware::random())
                        }
                    },
                    Err(_) => policy.delay(attempts, None, crate::middleware::random()),
                };
                if wait == Duration::MAX || !policy.allows(attempts, started.elapsed(), wait) {
                    return result.map(|mut response| {
                        let replayed = is_replayed(response.headers());
                        response.extensions_mut().insert(Delivery {
                            key: key.to_str().ok().map(str::to_owned),
                            attempts,
                            replayed,
                        });
                        response
                    });
                }
                tokio::time::sleep(wait).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use tonic_types::{ErrorDetails, StatusExt as _};

    use super::*;

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
