//! A client of `examples/payments` that creates payments the way a careful client does: one
//! idempotency key per payment, kept for every retry ([`idem_client`]).
//!
//! ```sh
//! cargo run --example payments &
//! cargo run --example pay_client -- --url http://127.0.0.1:3000 --payments 1000 --concurrency 16
//! # {"sent":1000,"succeeded":1000,"failed":0,"attempts":1000,"replayed":0,"payment_ids":1000}
//! ```
//!
//! | flag | default | |
//! |---|---|---|
//! | `--url` | `http://127.0.0.1:3000` | the service |
//! | `--payments N` | `100` | distinct payments to create (one logical operation each) |
//! | `--concurrency C` | `8` | payments in flight at once |
//! | `--timeout-ms T` | `10000` | the timeout of one attempt, answer included |
//!
//! A server that refuses the connection at start (not running, another port) is one line on
//! standard error and exit code 1 at once; once payments are under way, a refused connection is
//! retried (a restart of the service).
//!
//! It prints one JSON line: `sent` (N), `succeeded` and `failed` (payments), `attempts` (HTTP
//! requests sent in all), `replayed` (payments whose final answer was the stored one, after a
//! lost answer) and `payment_ids` (distinct `payment_id`s received). It exits with 0 only if
//! every payment succeeded and each got its own `payment_id`: a payment charged twice would
//! show as two ids for one order, one charged never as a failure.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::store::{Chain, ConnectCause};
use idem_client::{Idempotency, RetryPolicy, SendIdempotent};
use tokio::sync::Mutex;

/// What `--help` prints.
const USAGE: &str = "\
usage: pay_client [--url URL] [--payments N] [--concurrency C] [--timeout-ms T]

Creates N payments at the payments example's POST /v1/payments, one idempotency key each, kept
for every retry, and prints one JSON line of what happened.

  --url URL          the service (default http://127.0.0.1:3000)
  --payments N       distinct payments to create (default 100)
  --concurrency C    payments in flight at once (default 8)
  --timeout-ms T     the timeout of one attempt, answer included (default 10000)
  --help             this text";

struct Args {
    url: String,
    payments: usize,
    concurrency: usize,
    timeout: Duration,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        url: "http://127.0.0.1:3000".to_owned(),
        payments: 100,
        concurrency: 8,
        timeout: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag} takes a whole number, not {v:?}"))
        };
        match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--url" => args.url = value()?.trim_end_matches('/').to_owned(),
            "--payments" => args.payments = number(value()?)? as usize,
            "--concurrency" => args.concurrency = number(value()?)?.max(1) as usize,
            "--timeout-ms" => args.timeout = Duration::from_millis(number(value()?)?),
            _ => {
                return Err(format!(
                    "unknown flag {flag:?}: see `pay_client --help` (--url URL --payments N \
                     --concurrency C [--timeout-ms T])"
                ));
            }
        }
    }
    Ok(args)
}

#[derive(Default)]
struct Tally {
    succeeded: usize,
    failed: usize,
    attempts: u64,
    replayed: usize,
    payment_ids: HashSet<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("pay_client: {e}");
            return ExitCode::from(2);
        }
    };
    let http = reqwest::Client::builder()
        .timeout(args.timeout)
        .build()
        .expect("a client without TLS builds");
    if let Err(e) = reachable(&http, &args.url).await {
        eprintln!("pay_client: {e}");
        return ExitCode::FAILURE;
    }
    // A patient budget: a payment is worth waiting for through a restart of the service.
    let policy = RetryPolicy::default()
        .max_attempts(60)
        .max_elapsed(Duration::from_secs(120))
        .backoff(Duration::from_millis(20), Duration::from_secs(1))
        .max_retry_after(Duration::from_secs(5));
    let client = reqwest_middleware::ClientBuilder::new(http)
        .with(Idempotency::new().policy(policy))
        .build();
    // Order ids unique to this run, so that runs against one database do not meet.
    let run = uuid_like();
    let next = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let workers: Vec<_> = (0..args.concurrency.min(args.payments.max(1)))
        .map(|_| {
            let (client, next, tally, url, run) = (
                client.clone(),
                next.clone(),
                tally.clone(),
                format!("{}/v1/payments", args.url),
                run.clone(),
            );
            let n = args.payments;
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    let body = serde_json::json!({
                        "amount": format!("{}.{:02}", 10 + i % 90, i % 100),
                        "currency": "EUR",
                        "customer_id": format!("cus_{}", i % 97),
                        "order_id": format!("ord_{run}_{i}"),
                    });
                    let result = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send_idempotent()
                        .await;
                    let outcome = match result {
                        Ok(sent) => {
                            let attempts = sent.attempts();
                            let replayed = sent.replayed();
                            let body = sent.response.bytes().await.unwrap_or_default();
                            let id = serde_json::from_slice::<serde_json::Value>(&body)
                                .ok()
                                .and_then(|v| v["payment_id"].as_str().map(str::to_owned));
                            Ok((attempts, replayed, id))
                        }
                        Err(e) => Err(e),
                    };
                    let mut t = tally.lock().await;
                    match outcome {
                        Ok((attempts, replayed, Some(id))) => {
                            t.succeeded += 1;
                            t.attempts += u64::from(attempts);
                            t.replayed += usize::from(replayed);
                            t.payment_ids.insert(id);
                        }
                        Ok((attempts, _, None)) => {
                            eprintln!("pay_client: payment {i}: an answer without payment_id");
                            t.failed += 1;
                            t.attempts += u64::from(attempts);
                        }
                        Err(e) => {
                            if t.failed < 10 {
                                eprintln!("pay_client: payment {i}: {}", one_line(&e));
                            }
                            t.failed += 1;
                            t.attempts += u64::from(e.attempts());
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a worker does not panic");
    }
    let t = tally.lock().await;
    // The fields in this order, as documented (a `json!` map would sort them).
    println!(
        r#"{{"sent":{},"succeeded":{},"failed":{},"attempts":{},"replayed":{},"payment_ids":{}}}"#,
        args.payments,
        t.succeeded,
        t.failed,
        t.attempts,
        t.replayed,
        t.payment_ids.len(),
    );
    if t.succeeded == args.payments && t.payment_ids.len() == args.payments {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Whether there is a service to talk to, asked once before the payments: a refused connection
/// or an unknown host (nothing to retry against: a server not started, a wrong `--url`) would
/// otherwise be retried for the whole patient budget of every payment. Any other failure (no
/// answer in time, a connection reset: a server restarting, a flaky network) is what the
/// payments' retries are for: it is reported on one line and the payments go on.
async fn reachable(http: &reqwest::Client, url: &str) -> Result<(), String> {
    let Err(e) = http.get(format!("{url}/v1/stats")).send().await else {
        return Ok(());
    };
    match ConnectCause::of(&e) {
        ConnectCause::Refused => Err(format!(
            "the server at {url} refused the connection: is it running? start it with `cargo \
             run --example payments`, or pass --url"
        )),
        ConnectCause::UnknownHost => {
            Err(format!("the host of {url} does not resolve (check --url)"))
        }
        cause => {
            eprintln!(
                "pay_client: the server at {url} did not answer the first request ({cause}); the payments retry"
            );
            Ok(())
        }
    }
}

/// `e` and its causes on one line: what gave up, and the last transport error under it.
fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    Chain(e).to_string().replace('\n', " ")
}

/// 16 hex digits from the operating system's generator (through a fresh key's randomness).
fn uuid_like() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_owned()
}
