//! Contention: a storm of concurrent requests with one idempotency key through an
//! `#[idempotent]` axum handler, in process (`tower::ServiceExt::oneshot`), over every store:
//! memory, SQLite (a file in a temporary directory), PostgreSQL, MariaDB and Redis (when
//! `IDEM_TEST_POSTGRES_URL` / `IDEM_TEST_MYSQL_URL` / `IDEM_TEST_REDIS_URL` are set). The handler runs once, every other
//! request is answered `409` (in progress) or replayed, and the storm costs the store one claim
//! per request and one completion: no polling, no second claim. BENCHMARKS.md, "Contention",
//! measures the same storm over HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem::axum::Json;
use idem::store::Store;
use idem::{Fingerprint, Idem, Snapshot, idempotent};
use tokio::sync::Barrier;
use tower::ServiceExt;

use crate::backends::{Fixture, backend_tests, on_store};
use crate::counted::Counted;
use crate::servers::unique;

/// Concurrent requests per storm.
const STORM: u64 = 200;

#[derive(Clone)]
struct App {
    idem: Idem,
    runs: Arc<AtomicU64>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: u64,
    currency: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
    amount: u64,
    currency: String,
}

/// Holds the key for a while, so that the storm meets it in progress as well as completed.
#[idempotent(scope = global, contract = "exact_replay")]
async fn create_payment(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    let n = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(50)).await;
    (
        StatusCode::CREATED,
        Json(Payment {
            id: format!("pay_{n}"),
            amount: req.amount,
            currency: req.currency,
        }),
    )
}

async fn single_key_storm(fx: &Fixture) {
    let counted = Counted::new(fx.store.clone());
    let app = App {
        // Generous: the storm queues on the store's pool, and a slow machine must not turn
        // that wait into 503s; what is asserted is the work done, not how long it took.
        idem: Idem::from_arc(counted.clone()).with_store_timeout(Duration::from_secs(60)),
        runs: Arc::default(),
    };
    let router = Router::new()
        .route("/payments", post(create_payment))
        .with_state(app.clone());
    let key = unique("storm");
    let before = fx.statements();
    let gate = Arc::new(Barrier::new(STORM as usize));
    let tasks: Vec<_> = (0..STORM)
        .map(|_| {
            let req = Request::post("/payments")
                .header(CONTENT_TYPE, "application/json")
                .header("idempotency-key", key.as_str())
                .body(Body::from(r#"{"amount":100,"currency":"EUR"}"#))
                .unwrap();
            let (router, gate) = (router.clone(), gate.clone());
            tokio::spawn(async move {
                gate.wait().await;
                let res = router.oneshot(req).await.unwrap();
                let (parts, body) = res.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                (parts.status, parts.headers, body)
            })
        })
        .collect();
    let (mut fresh, mut replayed, mut in_progress) = (0, 0, 0);
    for t in tasks {
        let (status, headers, body) = t.await.unwrap();
        let replay = headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        match status {
            StatusCode::CREATED if replay => replayed += 1,
            StatusCode::CREATED => fresh += 1,
            StatusCode::CONFLICT => {
                assert!(headers.contains_key(RETRY_AFTER), "409 without Retry-After");
                in_progress += 1;
            }
            other => panic!(
                "unexpected {other} in a single-key storm: {}",
                String::from_utf8_lossy(&body)
            ),
        }
    }
    assert_eq!(
        app.runs.load(Ordering::SeqCst),
        1,
        "the handler ran more than once"
    );
    assert_eq!(fresh, 1, "{fresh} first answers");
    assert_eq!(fresh + replayed + in_progress, STORM);

    // The engine's calls: one claim per request, one completion, nothing else (a request that
    // polled the key, claimed twice or read the record would show here).
    assert_eq!(counted.claims(), STORM, "claims");
    assert_eq!(counted.completes(), 1, "completions");
    assert_eq!(counted.others(), 0, "other store calls");

    // The statements behind them (docs/storage.md, "Statements per path"): the winner's claim
    // is 1 and its completion 1; every other request's claim is at most 2 — on MariaDB and
    // SQLite always 2 (the claim statement, then the read of the row it met, in progress or
    // completed); on PostgreSQL 1 (the claim returns the row it met), or 2 when that row was
    // committed after the claim's snapshot, which is what a storm does to most of them (the
    // race row of the table). So exactly 2 per request on MariaDB and SQLite, and between
    // 1 per request plus the completion and 2 per request on PostgreSQL. Nothing releases,
    // purges or expires the key, so no claim loops ("claim again"), and one row's inserts do
    // not deadlock: any statement more (a retried claim, a poll) fails on MariaDB and SQLite,
    // and the calls counted above catch a second claim on every backend. On Redis every claim
    // is one script call whatever it meets, and nothing races between scripts: exactly one per
    // request, plus the completion.
    if let (Some(before), Some(after)) = (before, fx.statements()) {
        let sent = after - before;
        let expected = match counted.backend() {
            "postgres" => STORM + 1..=2 * STORM,
            "redis" => STORM + 1..=STORM + 1,
            _ => 2 * STORM..=2 * STORM,
        };
        assert!(
            expected.contains(&sent),
            "{sent} statements for {STORM} requests on {}, expected {expected:?}",
            counted.backend()
        );
    }
}

backend_tests!(
    4,
    on_store,
    [memory, sqlite, postgres, mysql, redis],
    single_key_storm,
);
