//! Cost per request (BENCHMARKS.md, "Cost per request"): one small payment handler called
//! in-process through an axum `Router` (no sockets), bare and under `#[idempotent]` on the
//! memory store, with fresh keys and with replays: heap allocations and bytes allocated per
//! request, counted by a counting global allocator, and the time per request, each round timing
//! the three paths one after the other so that every ratio is taken within a round.
//!
//! ```sh
//! cargo bench --bench request             # ROUNDS=15 REQUESTS=20000 by default
//! ```
//!
//! No sockets and no store round trip: what is left is the engine's own work per request (key,
//! fingerprint, claim, operation id, span, lease keeper, snapshot, completion, replay), which the
//! loopback figures of "HTTP end to end" hide under the kernel's.
#![allow(missing_docs)]

use std::alloc::System;
use std::hint::black_box;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use cpu_time::ThreadTime;
use http_body_util::BodyExt;
use idem::http::Json;
use idem::store::MemoryStore;
use idem::{Fingerprint, Idem, Snapshot, idempotent};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tower::ServiceExt;

/// Counts every allocation (and reallocation) and the bytes asked for.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The request of `examples/loadtest_server.rs`.
#[derive(Deserialize, Fingerprint)]
struct CreatePayment {
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    amount: Decimal,
    currency: String,
    order_id: String,
}

#[derive(Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    payment_id: String,
    status: &'static str,
    amount: Decimal,
    currency: String,
}

fn charge(req: CreatePayment) -> (StatusCode, Json<Payment>) {
    (
        StatusCode::CREATED,
        Json(Payment {
            payment_id: format!("pay_{}", req.order_id),
            status: "succeeded",
            amount: req.amount,
            currency: req.currency,
        }),
    )
}

async fn bare(Json(req): Json<CreatePayment>) -> (StatusCode, Json<Payment>) {
    charge(req)
}

#[idempotent(scope = global, contract = "exact_replay")]
async fn idem_payment(Json(req): Json<CreatePayment>) -> (StatusCode, Json<Payment>) {
    charge(req)
}

const BODY: &str = r#"{"amount": "100.00", "currency": "EUR", "order_id": "ord_184"}"#;

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Bare,
    Fresh,
    Replay,
}

impl Path {
    const ALL: [Path; 3] = [Path::Bare, Path::Fresh, Path::Replay];

    fn name(self) -> &'static str {
        match self {
            Path::Bare => "bare",
            Path::Fresh => "idem, fresh key",
            Path::Replay => "idem, replay",
        }
    }
}

fn request(path: Path, n: u64) -> Request<Body> {
    let mut req = Request::post(if path == Path::Bare { "/bare" } else { "/idem" })
        .header("content-type", "application/json");
    req = match path {
        Path::Bare => req,
        Path::Fresh => req.header("idempotency-key", format!("fresh-{n}")),
        Path::Replay => req.header("idempotency-key", "replayed"),
    };
    req.body(Body::from(BODY)).expect("a valid request")
}

async fn call(router: &Router, req: Request<Body>, expect: StatusCode) {
    let resp = router.clone().oneshot(req).await.expect("infallible");
    assert_eq!(resp.status(), expect);
    black_box(resp.into_body().collect().await.expect("a body").to_bytes());
}

/// One path, `n` requests, per request: wall-clock and CPU nanoseconds, allocations, bytes
/// allocated. Requests are built before the clocks and the counters start.
async fn measure(router: &Router, path: Path, n: u64, next: &mut u64) -> Sample {
    let reqs: Vec<_> = (0..n)
        .map(|_| {
            *next += 1;
            request(path, *next)
        })
        .collect();
    let region = Region::new(GLOBAL);
    let cpu = ThreadTime::now();
    let start = Instant::now();
    for req in reqs {
        // exact_replay answers a replay with the stored status.
        call(router, req, StatusCode::CREATED).await;
    }
    let n = n as f64;
    let wall = start.elapsed().as_nanos() as f64 / n;
    let cpu = cpu.elapsed().as_nanos() as f64 / n;
    let stats = region.change();
    Sample {
        wall,
        cpu,
        allocs: (stats.allocations + stats.reallocations) as f64 / n,
        bytes: (stats.bytes_allocated + stats.bytes_reallocated.max(0) as usize) as f64 / n,
    }
}

#[derive(Clone, Copy)]
struct Sample {
    wall: f64,
    cpu: f64,
    allocs: f64,
    bytes: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--test`: one quick round only.
    let quick = std::env::args().any(|a| a == "--test");
    let rounds = if quick { 1 } else { env("ROUNDS", 15) } as usize;
    let n = if quick { 50 } else { env("REQUESTS", 20_000) };
    let only = std::env::var("ONLY").ok();
    let only = only.as_deref();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let router = Router::new()
            .route("/bare", post(bare))
            .route("/idem", post(idem_payment))
            .with_state(Idem::new(MemoryStore::new()));
        let mut next = 0;
        call(&router, request(Path::Replay, 0), StatusCode::CREATED).await;
        // Warm-up: every path once at the size of a round.
        for path in Path::ALL {
            if only.is_some_and(|o| o != path.name()) {
                continue;
            }
            measure(&router, path, n.min(5_000), &mut next).await;
        }
        let mut rows: Vec<Vec<Sample>> = vec![Vec::new(); Path::ALL.len()];
        for round in 0..rounds {
            let mut order = Path::ALL.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for path in order {
                if only.is_some_and(|o| o != path.name()) {
                    continue;
                }
                let i = Path::ALL.iter().position(|p| *p == path).expect("a path");
                rows[i].push(measure(&router, path, n, &mut next).await);
            }
        }
        if only.is_some() {
            return; // profiling one path: no table
        }
        println!(
            "| path | CPU µs per request | × bare (CPU) | CPU µs over bare | wall µs per request | × bare (wall) | allocations per request | bytes allocated per request |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        let ratio = |i: usize, f: fn(&Sample) -> f64| {
            median((0..rounds).map(|r| f(&rows[i][r]) / f(&rows[0][r])).collect())
        };
        for (i, path) in Path::ALL.iter().enumerate() {
            let med = |f: fn(&Sample) -> f64| median(rows[i].iter().map(f).collect());
            let over = median(
                (0..rounds)
                    .map(|r| rows[i][r].cpu - rows[0][r].cpu)
                    .collect(),
            );
            println!(
                "| {} | {:.2} | {:.2} | {:+.2} | {:.2} | {:.2} | {:.1} | {:.0} |",
                path.name(),
                med(|s| s.cpu) / 1e3,
                ratio(i, |s| s.cpu),
                over / 1e3,
                med(|s| s.wall) / 1e3,
                ratio(i, |s| s.wall),
                med(|s| s.allocs),
                med(|s| s.bytes),
            );
        }
    });
}
