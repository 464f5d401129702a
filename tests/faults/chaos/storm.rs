//! Item 4, storms: a thousand connections opened first, then one request with one key and one
//! body sent on all of them at once. Exactly one runs the handler; every other answer is `409`
//! (in progress, with `Retry-After`) or the replay of that one, byte for byte; never `429`,
//! `500` or `503`, and no connection is refused or dropped.
//!
//! The SQL backends go through one process of the example (its real pools: 10 connections for
//! PostgreSQL and MariaDB, 8 for SQLite; a store timeout of 20 s, see below); the memory store,
//! which the example cannot use, through an in-process axum server on a real socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::routing::post;
use idem::axum::Json;
use idem::{Fingerprint, Idem, Snapshot, idempotent};
use serde_json::json;
use tokio::net::TcpStream;

use super::client::{self, Failure, Response};
use super::fleet::{Backend, Fleet};
use super::report;
use crate::servers::unique;

/// A storm not over by then hangs.
const HANG: Duration = Duration::from_secs(120);

/// Sends `raw` `n` times at once: every connection is opened first, then all requests go.
async fn storm(addr: SocketAddr, raw: Vec<u8>, n: usize) -> Vec<Result<Response, Failure>> {
    storm_across(&[addr], raw, n).await
}

/// [`storm`] with the connections spread over `addrs` in turn.
async fn storm_across(
    addrs: &[SocketAddr],
    raw: Vec<u8>,
    n: usize,
) -> Vec<Result<Response, Failure>> {
    let raw = Arc::new(raw);
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (raw, barrier, addr) = (raw.clone(), barrier.clone(), addrs[i % addrs.len()]);
            tokio::spawn(async move {
                let stream = TcpStream::connect(addr).await;
                barrier.wait().await;
                client::exchange_on(stream.map_err(Failure::Connect)?, &raw).await
            })
        })
        .collect();
    let all = async {
        let mut out = Vec::with_capacity(n);
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    };
    tokio::time::timeout(HANG, all)
        .await
        .unwrap_or_else(|_| panic!("the storm on {addrs:?} hung"))
}

/// Checks the answers: one ran (`201`, not replayed), the others `409` or its replay. Returns
/// a summary.
fn judge(what: &str, answers: &[Result<Response, Failure>]) -> String {
    let ran: Vec<&Response> = answers
        .iter()
        .flatten()
        .filter(|r| (200..300).contains(&r.status) && !r.replayed())
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "{what}: {} answers ran the handler",
        ran.len()
    );
    let first = ran[0];
    let (mut replays, mut conflicts) = (0, 0);
    let mut wrong = Vec::new();
    for answer in answers {
        match answer {
            Ok(r) if (200..300).contains(&r.status) && r.replayed() => {
                if r.body == first.body && r.status == first.status {
                    replays += 1;
                } else {
                    wrong.push(format!("a replay differs: {} {}", r.status, r.text()));
                }
            }
            Ok(r) if r.status == 409 => {
                if r.problem().as_deref() == Some("in-progress") && r.retry_after().is_some() {
                    conflicts += 1;
                } else {
                    wrong.push(format!("409 {}", r.text()));
                }
            }
            Ok(r) if std::ptr::eq(r, first) => {}
            Ok(r) => wrong.push(format!("{} {}", r.status, r.text())),
            Err(e) => wrong.push(e.to_string()),
        }
    }
    let mut kinds: Vec<String> = wrong
        .iter()
        .map(|w| w.chars().take(400).collect())
        .collect();
    kinds.dedup();
    let store_unavailable = wrong
        .iter()
        .filter(|w| w.contains("store-unavailable"))
        .count();
    assert!(
        wrong.is_empty(),
        "{what}: {} answers neither 409 nor the replay ({store_unavailable} of them 503 \
         store-unavailable: claims that waited for a pool connection longer than the store \
         timeout, 20 s here, which happens when the machine's CPUs are saturated), e.g.:\n{}",
        wrong.len(),
        kinds.into_iter().take(10).collect::<Vec<_>>().join("\n")
    );
    format!(
        "{} requests: 1 ran ({}), {replays} replays, {conflicts} x 409, 0 other",
        answers.len(),
        first.status
    )
}

/// A storm on one process of the example over `backend`.
pub async fn through_the_example(backend: Backend, n: usize) {
    let Some(db) = backend.database().await else {
        return;
    };
    // The storm checks coalescing, not the machine's speed: a thousand claims queue for the
    // pool's 8-10 connections, and on a CPU-starved machine (a shared CI runner) some would wait
    // past the default 2 s store timeout and be answered 503, which is that timeout doing its
    // job (tests/faults/bad_day.rs checks it). 20 s keeps them waiting instead.
    let fleet = Fleet::start(&db, 1, &[("PAYMENTS_STORE_TIMEOUT_MS", "20000".to_owned())]).await;
    let key = unique("storm");
    let body =
        json!({"amount": "9.99", "currency": "EUR", "customer_id": "cus_s", "order_id": key})
            .to_string();
    let raw = client::request(
        "POST",
        "/v1/payments",
        &[("Idempotency-Key", &key)],
        Some(&body),
    );
    let started = Instant::now();
    let answers = storm(fleet.addrs()[0], raw, n).await;
    let took = started.elapsed();
    let summary = judge(backend.name(), &answers);
    fleet.assert_alive();
    let payments = db.payments().await;
    assert_eq!(payments.len(), 1, "{payments:?}");
    let record = db.record(&key).await.unwrap();
    assert_eq!((record.state, record.fence), (1, 1), "{record:?}");
    report(&format!(
        "storm [{}] through one process of the example: {summary}; payments 1, record fence 1; \
         {:.2} s",
        backend.name(),
        took.as_secs_f64()
    ));
}

/// Storms of one key through processes of the example on different nodes of the MariaDB Galera
/// cluster at once (one process per node): through two nodes, then through three. Each is one
/// payment, one record at fence 1: the nodes' certification lets one claim through, and every
/// other answer is `409` or the replay.
pub async fn across_galera_nodes(n: usize) {
    let Some(db) = crate::backends::Database::on_galera().await else {
        return;
    };
    let fleet = Fleet::start(&db, 3, &[("PAYMENTS_STORE_TIMEOUT_MS", "20000".to_owned())]).await;
    for nodes in [2, 3] {
        let key = unique("galera_storm");
        let body =
            json!({"amount": "9.99", "currency": "EUR", "customer_id": "cus_s", "order_id": key})
                .to_string();
        let raw = client::request(
            "POST",
            "/v1/payments",
            &[("Idempotency-Key", &key)],
            Some(&body),
        );
        let started = Instant::now();
        let answers = storm_across(&fleet.addrs()[..nodes], raw, n).await;
        let took = started.elapsed();
        let summary = judge(&format!("galera, {nodes} nodes"), &answers);
        let payments: Vec<_> = db
            .payments()
            .await
            .into_iter()
            .filter(|p| p.order_id == key)
            .collect();
        assert_eq!(payments.len(), 1, "{payments:?}");
        let record = db.record(&key).await.unwrap();
        assert_eq!((record.state, record.fence), (1, 1), "{record:?}");
        report(&format!(
            "storm [galera] through {nodes} processes, one per node: {summary}; payments 1, \
             record fence 1; {:.2} s",
            took.as_secs_f64()
        ));
    }
    fleet.assert_alive();
}

#[derive(Clone)]
struct Counter {
    idem: Idem,
    runs: Arc<AtomicUsize>,
}

impl FromRef<Counter> for Idem {
    fn from_ref(app: &Counter) -> Idem {
        app.idem.clone()
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct Charge {
    order_id: String,
    amount: u64,
}

#[derive(serde::Serialize, Snapshot)]
struct Charged {
    #[snapshot(biz_no)]
    charge_id: String,
    amount: u64,
}

#[idempotent(scope = global, operation = "storm.charge", lease = "10s")]
async fn charge(
    State(app): State<Counter>,
    Json(req): Json<Charge>,
) -> (StatusCode, Json<Charged>) {
    app.runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let op = idem::operation_id().expect("inside the handler");
    let _ = req.order_id;
    (
        StatusCode::CREATED,
        Json(Charged {
            charge_id: format!("ch_{}", op.as_str().replace('-', "")),
            amount: req.amount,
        }),
    )
}

/// A storm on an in-process server over the memory store.
pub async fn memory(n: usize) {
    let app = Counter {
        idem: Idem::new(idem::MemoryStore::new()),
        runs: Arc::default(),
    };
    let router = Router::new()
        .route("/charges", post(charge))
        .with_state(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let key = unique("storm");
    let body = json!({"order_id": key, "amount": 999}).to_string();
    let raw = client::request(
        "POST",
        "/charges",
        &[("Idempotency-Key", &key)],
        Some(&body),
    );
    let started = Instant::now();
    let answers = storm(addr, raw, n).await;
    let took = started.elapsed();
    let summary = judge("memory", &answers);
    assert_eq!(app.runs.load(Ordering::SeqCst), 1, "handler runs");
    server.abort();
    report(&format!(
        "storm [memory] through an in-process server: {summary}; handler ran once; {:.2} s",
        took.as_secs_f64()
    ));
}
