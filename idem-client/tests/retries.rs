//! The middleware against a scripted HTTP/1.1 server on loopback: what it retries, with which
//! key, and what it returns.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_client::{Error, GaveUp, Idempotency, LastAttempt, RetryPolicy, SendIdempotent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the server does with one request.
#[derive(Clone)]
enum Step {
    /// Answer with this status, headers and body.
    Answer(u16, &'static [(&'static str, &'static str)], &'static str),
    /// Read the request and close the connection without a word.
    Drop,
    /// Send the head and part of a longer body, then close.
    CutBody,
    /// Say nothing for this long, then close.
    Stall(Duration),
}

const PROBLEM: &[(&str, &str)] = &[("content-type", "application/problem+json")];

/// A server that plays `script` (one step per request, the last one forever) and records the
/// `idempotency-key` of each request (`None` when absent).
async fn serve(script: Vec<Step>) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/payments", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let script = script.clone();
            let log = log.clone();
            tokio::spawn(async move {
                loop {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // A request: the head, then Content-Length bytes.
                    let head_end = loop {
                        let n = match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let header = |name: &str| {
                        head.lines()
                            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
                    };
                    let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
                    while buf.len() < head_end + length {
                        let n = socket.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let step = {
                        let mut log = log.lock().unwrap();
                        log.push(header("idempotency-key"));
                        script[(log.len() - 1).min(script.len() - 1)].clone()
                    };
                    match step {
                        Step::Answer(status, headers, body) => {
                            let mut out = format!(
                                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n",
                                body.len()
                            );
                            for (k, v) in headers {
                                out.push_str(&format!("{k}: {v}\r\n"));
                            }
                            out.push_str("\r\n");
                            out.push_str(body);
                            if socket.write_all(out.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        Step::Drop => return,
                        Step::CutBody => {
                            let _ = socket
                                .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 100\r\n\r\n{\"payment")
                                .await;
                            return;
                        }
                        Step::Stall(d) => {
                            tokio::time::sleep(d).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, seen)
}

fn client(policy: RetryPolicy) -> reqwest_middleware::ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(
        reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .build()
            .unwrap(),
    )
    .with(Idempotency::new().policy(policy))
    .build()
}

/// A `POST` of `{}` to `url` through a client with `policy`.
async fn post(url: &str, policy: RetryPolicy) -> Result<idem_client::Sent, Error> {
    client(policy).post(url).body("{}").send_idempotent().await
}

fn fast() -> RetryPolicy {
    RetryPolicy::default().backoff(Duration::from_millis(1), Duration::from_millis(5))
}

fn keys(seen: &Mutex<Vec<Option<String>>>) -> Vec<Option<String>> {
    seen.lock().unwrap().clone()
}

/// Every attempt carried one key, a UUID the middleware generated.
fn one_generated_key(seen: &Mutex<Vec<Option<String>>>, attempts: usize) -> String {
    let keys = keys(seen);
    assert_eq!(keys.len(), attempts, "{keys:?}");
    let first = keys[0].clone().expect("a key on the first attempt");
    assert!(uuid::Uuid::parse_str(&first).is_ok(), "{first}");
    assert!(
        keys.iter().all(|k| k.as_deref() == Some(&*first)),
        "{keys:?}"
    );
    first
}

#[tokio::test]
async fn a_503_then_a_success_is_two_attempts_with_one_key() {
    let (url, seen) = serve(vec![
        Step::Answer(503, &[("retry-after", "0")], ""),
        Step::Answer(201, &[], r#"{"payment_id":"pay_1"}"#),
    ])
    .await;
    let sent = post(&url, fast()).await.unwrap();
    assert_eq!(sent.status(), 201);
    assert_eq!(sent.attempts(), 2);
    assert!(!sent.replayed());
    let key = one_generated_key(&seen, 2);
    assert_eq!(sent.key(), Some(&*key));
    assert_eq!(
        sent.response.text().await.unwrap(),
        r#"{"payment_id":"pay_1"}"#
    );
}

#[tokio::test]
async fn a_409_waits_for_its_retry_after_and_gets_the_replay() {
    let (url, seen) = serve(vec![
        Step::Answer(
            409,
            &[
                ("retry-after", "1"),
                ("content-type", "application/problem+json"),
            ],
            r#"{"type":"in-progress"}"#,
        ),
        Step::Answer(201, &[("idempotent-replayed", "true")], "{}"),
    ])
    .await;
    let started = Instant::now();
    let sent = post(&url, fast()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(sent.replayed());
    assert_eq!(sent.attempts(), 2);
    one_generated_key(&seen, 2);
}

#[tokio::test]
async fn the_callers_key_is_kept() {
    let (url, seen) = serve(vec![Step::Drop, Step::Answer(201, &[], "{}")]).await;
    let sent = client(fast())
        .post(&url)
        .header("idempotency-key", "order-42")
        .body("{}")
        .send_idempotent()
        .await
        .unwrap();
    assert_eq!(sent.key(), Some("order-42"));
    assert_eq!(keys(&seen), vec![Some("order-42".to_owned()); 2]);
}

#[tokio::test]
async fn broken_connections_and_timeouts_are_retried() {
    let (url, seen) = serve(vec![
        Step::Drop,
        Step::CutBody,
        Step::Stall(Duration::from_secs(2)),
        Step::Answer(
            201,
            &[("idempotent-replayed", "true")],
            r#"{"payment_id":"pay_1"}"#,
        ),
    ])
    .await;
    let sent = post(&url, fast()).await.unwrap();
    assert_eq!(sent.attempts(), 4);
    assert!(sent.replayed());
    one_generated_key(&seen, 4);
    // The body was read before the answer was returned: reading it again cannot fail.
    assert_eq!(
        sent.response.text().await.unwrap(),
        r#"{"payment_id":"pay_1"}"#
    );
}

#[tokio::test]
async fn a_422_is_key_reused_with_its_problem_and_never_retried() {
    let (url, seen) = serve(vec![Step::Answer(
        422,
        PROBLEM,
        r#"{"type":"https://payments.example/problems/key-reused","title":"Idempotency key reused","status":422,"detail":"another request"}"#,
    )])
    .await;
    let err = post(&url, fast()).await.unwrap_err();
    let Error::KeyReused(failure) = &err else {
        panic!("{err:?}")
    };
    let problem = failure.problem.as_ref().unwrap();
    assert_eq!(problem.kind, "https://payments.example/problems/key-reused");
    assert_eq!(problem.title.as_deref(), Some("Idempotency key reused"));
    assert_eq!(problem.status, Some(422));
    assert_eq!(problem.detail.as_deref(), Some("another request"));
    assert_eq!(err.attempts(), 1);
    assert_eq!(keys(&seen).len(), 1);
}

#[tokio::test]
async fn a_410_key_expired_is_typed_with_its_business_number_and_never_retried() {
    let (url, seen) = serve(vec![Step::Answer(
        410,
        PROBLEM,
        r#"{"type":"https://payments.example/problems/key-expired","title":"Idempotency key expired","status":410,"biz_no":"pay_7","operation_id":"0f9a1c52-7d4b-4b3e-9d59-6c0c1f0e2a11","response_status":201,"completed_at":"2026-01-02T03:04:05.678Z","expired_at":"2026-01-09T03:04:05.000Z","remember_until":"2027-01-02T03:04:05.000Z"}"#,
    )])
    .await;
    let err = post(&url, fast()).await.unwrap_err();
    let Error::KeyExpired(expired) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(expired.biz_no.as_deref(), Some("pay_7"));
    assert_eq!(
        expired.operation_id.as_deref(),
        Some("0f9a1c52-7d4b-4b3e-9d59-6c0c1f0e2a11")
    );
    assert_eq!(expired.response_status, Some(201));
    assert_eq!(
        expired.expired_at.as_deref(),
        Some("2026-01-09T03:04:05.000Z")
    );
    assert_eq!(
        expired.remember_until.as_deref(),
        Some("2027-01-02T03:04:05.000Z")
    );
    assert_eq!(expired.failure.status, 410);
    assert!(err.to_string().contains("business number pay_7"), "{err}");
    assert_eq!(err.attempts(), 1);
    assert_eq!(keys(&seen).len(), 1, "never retried");
}

#[tokio::test]
async fn final_statuses_are_sent_once() {
    for status in [400u16, 401, 403, 404, 410] {
        let (url, seen) = serve(vec![Step::Answer(status, &[], "no")]).await;
        let err = post(&url, fast()).await.unwrap_err();
        let Error::Refused(failure) = &err else {
            panic!("{status}: {err:?}")
        };
        assert_eq!(failure.status, status);
        assert_eq!(failure.body, "no");
        assert_eq!(keys(&seen).len(), 1, "{status}");
    }
}

#[tokio::test]
async fn a_replayed_failure_is_the_stored_answer() {
    let (url, seen) = serve(vec![Step::Answer(
        500,
        &[("idempotent-replayed", "true")],
        "{}",
    )])
    .await;
    let err = post(&url, fast()).await.unwrap_err();
    let Error::Refused(failure) = &err else {
        panic!("{err:?}")
    };
    assert!(failure.delivery.replayed);
    assert_eq!(keys(&seen).len(), 1);
}

#[tokio::test]
async fn the_attempts_budget_gives_up_with_the_last_answer() {
    let (url, seen) = serve(vec![Step::Answer(
        503,
        &[("retry-after", "0")],
        PROBLEM_BODY,
    )])
    .await;
    let err = post(&url, fast().max_attempts(3)).await.unwrap_err();
    let Error::GaveUp(GaveUp {
        last: LastAttempt::Answered(failure),
        ..
    }) = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(failure.status, 503);
    // Each cause printed once: the error, then the answer as its source.
    assert_eq!(err.to_string(), "gave up after 3 attempts");
    let source = std::error::Error::source(&err)
        .expect("the last answer")
        .to_string();
    assert!(source.starts_with("the last answer was 503"), "{source}");
    assert!(!source.contains("gave up"), "{source}");
    assert_eq!(err.problem().unwrap().kind, "unavailable");
    assert_eq!(
        failure.problem.as_ref().unwrap().retry_after,
        Some(Duration::ZERO)
    );
    assert_eq!(err.attempts(), 3);
    one_generated_key(&seen, 3);
}

const PROBLEM_BODY: &str = r#"{"type":"unavailable","status":503}"#;

#[tokio::test]
async fn the_time_budget_stops_before_a_wait_that_would_pass_it() {
    let (url, seen) = serve(vec![Step::Answer(409, &[("retry-after", "5")], "")]).await;
    let started = Instant::now();
    let err = post(&url, fast().max_elapsed(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            err,
            Error::GaveUp(GaveUp {
                last: LastAttempt::Answered(_),
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(keys(&seen).len(), 1);
}

#[tokio::test]
async fn transport_errors_past_the_budget_give_up_with_the_key() {
    let (url, seen) = serve(vec![Step::Drop]).await;
    let err = post(&url, fast().max_attempts(4)).await.unwrap_err();
    let Error::GaveUp(gave_up) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(gave_up.attempts, 4);
    assert!(matches!(gave_up.last, LastAttempt::Failed(_)), "{err:?}");
    // The transport error is the source, not repeated in the message.
    assert_eq!(err.to_string(), "gave up after 4 attempts");
    assert!(std::error::Error::source(&err).is_some());
    let key = one_generated_key(&seen, 4);
    assert_eq!(err.key(), Some(&*key));
}

#[tokio::test]
async fn other_methods_pass_through_without_a_key_or_retries() {
    let (url, seen) = serve(vec![Step::Answer(503, &[], "")]).await;
    let err = client(fast())
        .get(&url)
        .send_idempotent()
        .await
        .unwrap_err();
    let Error::GaveUp(gave_up) = &err else {
        panic!("{err:?}")
    };
    assert_eq!((gave_up.attempts, gave_up.key.as_deref()), (1, None));
    assert!(matches!(gave_up.last, LastAttempt::Answered(_)), "{err:?}");
    assert_eq!(keys(&seen), vec![None]);
    // A configured set: PUT gets a key too.
    let (url, seen) = serve(vec![Step::Answer(200, &[], "")]).await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(Idempotency::new().methods([reqwest::Method::PUT]))
        .build();
    client.put(&url).send_idempotent().await.unwrap();
    client.post(&url).send_idempotent().await.unwrap();
    let keys = keys(&seen);
    assert!(keys[0].is_some() && keys[1].is_none(), "{keys:?}");
}

#[tokio::test]
async fn a_streaming_body_is_sent_once() {
    let (url, seen) = serve(vec![Step::Answer(503, &[("retry-after", "0")], "")]).await;
    let stream = reqwest::Body::wrap_stream(futures_stream());
    let err = client(fast())
        .post(&url)
        .body(stream)
        .send_idempotent()
        .await
        .unwrap_err();
    assert_eq!(err.attempts(), 1, "{err:?}");
    assert_eq!(keys(&seen).len(), 1);
}

/// A streaming body is sent once: when the connection breaks, the outcome is unknown and the
/// error carries the key it was sent with, never a bare transport error the caller would retry
/// with a new key.
#[tokio::test]
async fn a_streaming_body_that_breaks_gives_up_with_its_key() {
    let (url, seen) = serve(vec![Step::Drop]).await;
    let err = client(fast())
        .post(&url)
        .body(reqwest::Body::wrap_stream(futures_stream()))
        .send_idempotent()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::GaveUp(_)), "{err:?}");
    assert_eq!(err.attempts(), 1);
    let key = one_generated_key(&seen, 1);
    assert_eq!(err.key(), Some(&*key));
}

fn futures_stream()
-> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + 'static {
    struct Once(Option<Vec<u8>>);
    impl futures_core::Stream for Once {
        type Item = Result<Vec<u8>, std::io::Error>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(self.0.take().map(Ok))
        }
    }
    Once(Some(b"{}".to_vec()))
}
