//! The reqwest middleware: one key per logical operation, retried as the [`RetryPolicy`] says.

use std::time::{Instant, SystemTime};

use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::RetryPolicy;
use crate::error::{Delivery, GaveUp, LastAttempt};
use crate::policy::{Verdict, classify, is_replayed};

/// The request header that carries the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Middleware for [`reqwest_middleware::ClientWithMiddleware`] that makes every request with a
/// method of its set (default `POST` and `PATCH`) one logical operation:
///
/// - it gives the request an `Idempotency-Key` (a random UUID) unless the caller set one, and
///   sends **that** key on every retry;
/// - it retries connection failures, timeouts, connections broken after the request was sent
///   (also in the middle of the answer: the answer's body is read before it is returned), and
///   the answers [`classify`](crate::classify) calls retryable, within the policy's budget;
/// - it returns the final answer, whatever its status (as reqwest does; [`SendIdempotent`](
///   crate::SendIdempotent) turns it into a typed result), with a [`Delivery`] in its
///   extensions. When the budget runs out on a transport error, the error is a
///   [`reqwest_middleware::Error::Middleware`] holding a [`GaveUp`].
///
/// A request whose body cannot be cloned (a stream) is sent once and never retried: its bytes
/// are gone after the first attempt.
///
/// Why version 4 UUIDs and not version 7: idem identifies a record by a SHA-256 hash of the
/// key and its scope, so a time-ordered key gains no index locality on the server, while it
/// would publish when the operation began and keep 74 random bits instead of 122.
///
/// Methods outside the set pass through untouched: `PUT` and `DELETE` are idempotent by their
/// definition, and retrying a `GET` is the business of a general retry middleware.
///
/// ```no_run
/// use idem_client::{Idempotency, RetryPolicy, SendIdempotent};
///
/// # async fn run() -> Result<(), idem_client::Error> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(Idempotency::new().policy(RetryPolicy::default().max_attempts(8)))
///     .build();
/// let sent = client
///     .post("http://127.0.0.1:3000/v1/payments")
///     .header("content-type", "application/json")
///     .body(r#"{"amount":"10.00","currency":"EUR","customer_id":"cus_1","order_id":"ord_1"}"#)
///     .send_idempotent()
///     .await?;
/// println!("{} after {} attempts, replayed: {}", sent.status(), sent.attempts(), sent.replayed());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Idempotency {
    methods: Vec<Method>,
    policy: RetryPolicy,
}

impl Default for Idempotency {
    fn default() -> Self {
        Idempotency {
            methods: vec![Method::POST, Method::PATCH],
            policy: RetryPolicy::default(),
        }
    }
}

impl Idempotency {
    /// `POST` and `PATCH`, with [`RetryPolicy::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The methods that get a key and retries.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// The retry policy.
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }
}

/// A transport error worth another attempt with the same key: the request may or may not have
/// reached the server, and the key makes both cases safe.
fn retryable(error: &reqwest_middleware::Error) -> bool {
    match error {
        reqwest_middleware::Error::Reqwest(e) => {
            e.is_connect() || e.is_timeout() || e.is_request() || e.is_body()
        }
        // Another middleware's refusal is not the network's.
        reqwest_middleware::Error::Middleware(_) => false,
    }
}

/// Reads the body of `response` so that a connection broken in the middle of the answer is a
/// failed attempt, not a failure of the caller's later read.
async fn buffered(response: Response) -> Result<Response, reqwest::Error> {
    use reqwest::ResponseBuilderExt as _;
    let mut head = http::Response::builder()
        .status(response.status())
        .version(response.version());
    if let Some(headers) = head.headers_mut() {
        *headers = response.headers().clone();
    }
    if let Some(extensions) = head.extensions_mut() {
        *extensions = response.extensions().clone();
    }
    let head = head.url(response.url().clone());
    let body = response.bytes().await?;
    Ok(Response::from(
        head.body(body)
            .expect("status and headers came from a response"),
    ))
}

/// The key in `headers`, after giving them a new one (a random UUID) if they had none.
pub(crate) fn key_of(headers: &mut HeaderMap) -> HeaderValue {
    headers
        .entry(IDEMPOTENCY_KEY)
        .or_insert_with(|| {
            HeaderValue::try_from(uuid::Uuid::new_v4().to_string())
                .expect("a UUID is a valid header value")
        })
        .clone()
}

#[async_trait::async_trait]
impl Middleware for Idempotency {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        if !self.methods.contains(req.method()) {
            return next.run(req, extensions).await;
        }
        let key = key_of(req.headers_mut());
        let key_text = key.to_str().ok().map(str::to_owned);
        let delivery = |attempts, response: &Response| Delivery {
            key: key_text.clone(),
            attempts,
            replayed: is_replayed(response.headers()),
        };
        let started = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let Some(spare) = req.try_clone() else {
                // A stream: sent once, whatever happens; a transport error still carries the
                // key, with which the caller can learn the outcome.
                let mut response = match next.run(req, extensions).await {
                    Ok(response) => response,
                    Err(source) => {
                        return Err(reqwest_middleware::Error::middleware(GaveUp {
                            attempts,
                            key: key_text,
                            last: LastAttempt::Failed(source),
                        }));
                    }
                };
                let d = delivery(attempts, &response);
                response.extensions_mut().insert(d);
                return Ok(response);
            };
            let attempt = std::mem::replace(&mut req, spare);
            let failure = match next.clone().run(attempt, extensions).await {
                Ok(response) => {
                    let wait =
                        match classify(response.status(), response.headers(), SystemTime::now()) {
                            Verdict::Final => None,
                            Verdict::Retry { retry_after } => {
                                self.policy.next_wait(attempts, started, retry_after)
                            }
                        };
                    if let Some(wait) = wait {
                        drop(response);
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    match buffered(response).await {
                        Ok(mut response) => {
                            let d = delivery(attempts, &response);
                            response.extensions_mut().insert(d);
                            return Ok(response);
                        }
                        // Broken in the middle of the answer (reqwest reports it as a decode
                        // error over a body error): the answer is stored on the server, and the
                        // retry gets it.
                        Err(e) => reqwest_middleware::Error::Reqwest(e),
                    }
                }
                Err(e) if retryable(&e) => e,
                Err(e) => return Err(e),
            };
            let Some(wait) = self.policy.next_wait(attempts, started, None) else {
                return Err(reqwest_middleware::Error::middleware(GaveUp {
                    attempts,
                    key: key_text,
                    last: LastAttempt::Failed(failure),
                }));
            };
            tokio::time::sleep(wait).await;
        }
    }
}
