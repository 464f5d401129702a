//! Encryption at rest (BENCHMARKS.md, "Encryption at rest"): what `Idem::with_encryption`
//! costs a request. One payment handler under `#[idempotent]`, its response padded to 1 KiB or
//! 64 KiB with a whitelisted `location` header, called in process through an axum `Router` (as
//! `benches/request.rs` does: no sockets, one thread), on the memory store and on SQLite (a file
//! in a temporary directory), with fresh keys and with replays of one key, through a handle with
//! a key ring and through one without.
//!
//! ```sh
//! cargo bench --bench encryption         # ROUNDS=15, request counts scaled per cell
//! ```
//!
//! A round measures every cell (store × body size) sealed and plain, one after the other, the
//! order reversed every other round, each on a new store (so that both meet a store of the same
//! size); every ratio is taken within a round. `SCALE` multiplies the request counts, `ONLY`
//! (`memory` or `sqlite`) keeps one store.
#![allow(missing_docs)]

use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use cpu_time::ThreadTime;
use http_body_util::BodyExt;
use idem::MemoryStore;
use idem::axum::Json;
use idem::seal::KeyRing;
use idem::store::Store;
use idem::{Fingerprint, Idem, Snapshot, SqliteStore, idempotent};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tower::ServiceExt;

/// Counts every allocation (and reallocation) and the bytes asked for.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The request of `benches/request.rs`.
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
    /// Brings the body to the cell's size.
    padding: &'static str,
}

#[derive(Clone)]
struct App {
    idem: Idem,
    padding: &'static str,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

fn payment(req: CreatePayment, padding: &'static str) -> Payment {
    Payment {
        payment_id: format!("pay_{}", req.order_id),
        status: "succeeded",
        amount: req.amount,
        currency: req.currency,
        padding,
    }
}

#[idempotent(scope = global, contract = "exact_replay", headers = ["location"])]
async fn create_payment(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, [(&'static str, String); 1], Json<Payment>) {
    let payment = payment(req, app.padding);
    let location = format!("/v1/payments/{}", payment.payment_id);
    (StatusCode::CREATED, [("location", location)], Json(payment))
}

const BODY: &str = r#"{"amount": "100.00", "currency": "EUR", "order_id": "ord_184"}"#;

/// A padding that makes the response body exactly `size` bytes.
fn padding(size: usize) -> &'static str {
    let req: CreatePayment = serde_json::from_str(BODY).expect("a valid request");
    let base = serde_json::to_vec(&payment(req, ""))
        .expect("serializable")
        .len();
    "x".repeat(size - base).leak()
}

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Memory,
    Sqlite,
}

#[derive(Clone, Copy)]
struct Cell {
    backend: Backend,
    size: usize,
    /// Requests per path and mode in a round (before `SCALE`).
    requests: u64,
}

impl Cell {
    fn store_name(&self) -> &'static str {
        match self.backend {
            Backend::Memory => "memory",
            Backend::Sqlite => "SQLite",
        }
    }
}

const CELLS: [Cell; 4] = [
    Cell {
        backend: Backend::Memory,
        size: 1024,
        requests: 12_000,
    },
    Cell {
        backend: Backend::Memory,
        size: 64 * 1024,
        requests: 2_000,
    },
    Cell {
        backend: Backend::Sqlite,
        size: 1024,
        requests: 2_000,
    },
    Cell {
        backend: Backend::Sqlite,
        size: 64 * 1024,
        requests: 1_000,
    },
];

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Fresh,
    Replay,
}

const PATHS: [Path; 2] = [Path::Fresh, Path::Replay];

fn request(path: Path, n: u64) -> Request<Body> {
    let key = match path {
        Path::Fresh => format!("fresh-{n}"),
        Path::Replay => "replayed".to_owned(),
    };
    Request::post("/payments")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(BODY))
        .expect("a valid request")
}

/// Sends `req`; the body's length, so that a cell can check its size.
async fn call(router: &Router, req: Request<Body>) -> usize {
    let resp = router.clone().oneshot(req).await.expect("infallible");
    // exact_replay answers a replay with the stored status.
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert!(resp.headers().contains_key("location"));
    let body = resp.into_body().collect().await.expect("a body").to_bytes();
    black_box(body).len()
}

#[derive(Clone, Copy, Default)]
struct Sample {
    /// Nanoseconds per request.
    wall: f64,
    /// Nanoseconds of the measuring thread's CPU per request (SQLite runs its statements on
    /// threads of its own: this is the engine's share).
    cpu: f64,
    /// Bytes allocated per request.
    bytes: f64,
}

/// `n` requests on `path`, built before the clocks and the counters start.
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
        call(router, req).await;
    }
    let n = n as f64;
    let wall = start.elapsed().as_nanos() as f64 / n;
    let cpu = cpu.elapsed().as_nanos() as f64 / n;
    let stats = region.change();
    Sample {
        wall,
        cpu,
        bytes: (stats.bytes_allocated + stats.bytes_reallocated.max(0) as usize) as f64 / n,
    }
}

/// A new store of `backend`; the directory holding a SQLite file goes with it.
async fn store(backend: Backend) -> (Arc<dyn Store>, Option<tempfile::TempDir>) {
    match backend {
        Backend::Memory => (Arc::new(MemoryStore::new()), None),
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store = SqliteStore::open(dir.path().join("idem.db"))
                .await
                .expect("a SQLite file");
            store.migrate().await.expect("the schema");
            (Arc::new(store), Some(dir))
        }
    }
}

/// Both paths of `cell` on a new store, sealed or plain: fresh keys, then replays of one key.
async fn run(
    cell: Cell,
    padding: &'static str,
    sealed: bool,
    n: u64,
    next: &mut u64,
) -> [Sample; 2] {
    let (store, dir) = store(cell.backend).await;
    let mut idem = Idem::from_arc(store);
    if sealed {
        idem = idem.with_encryption(KeyRing::new("k1", [7u8; 32]).expect("a key ring"));
    }
    let router = Router::new()
        .route("/payments", post(create_payment))
        .with_state(App { idem, padding });
    // The first call stores the replayed key's record, the second replays it (opened, when
    // sealed): both bodies have the cell's size.
    for _ in 0..2 {
        let len = call(&router, request(Path::Replay, 0)).await;
        assert_eq!(len, cell.size, "the body has the cell's size");
    }
    let mut out = [Sample::default(); 2];
    for (i, path) in PATHS.into_iter().enumerate() {
        out[i] = measure(&router, path, n, next).await;
    }
    drop(router);
    drop(dir);
    out
}

/// Nanoseconds to copy a body of `size` bytes into a new `Vec` (and free it): the unit of the
/// copies sealing adds.
fn copy_ns(size: usize) -> f64 {
    let body = vec![b'x'; size];
    let n = (64 * 1024 * 1024 / size).max(1);
    let start = Instant::now();
    for _ in 0..n {
        black_box(black_box(&body).to_vec());
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--test`: one quick round only.
    let quick = std::env::args().any(|a| a == "--test");
    let rounds = if quick {
        1
    } else {
        env("ROUNDS", 15.0) as usize
    };
    let scale = if quick { 0.02 } else { env("SCALE", 1.0) };
    let only = std::env::var("ONLY").ok();
    let cells: Vec<Cell> = CELLS
        .into_iter()
        .filter(|c| {
            only.as_deref()
                .is_none_or(|o| o.eq_ignore_ascii_case(c.store_name()))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut next = 0;
        let paddings: Vec<_> = cells.iter().map(|c| padding(c.size)).collect();
        let count = |c: &Cell| ((c.requests as f64 * scale) as u64).max(10);
        // Warm-up: every cell in both modes at a quarter of a round.
        for (c, cell) in cells.iter().enumerate() {
            for sealed in [true, false] {
                run(*cell, paddings[c], sealed, count(cell) / 4, &mut next).await;
            }
        }
        // [cell][mode: 0 sealed, 1 plain][round][path]
        let mut rows = vec![[Vec::new(), Vec::new()]; cells.len()];
        let mut copies = vec![Vec::new(); cells.len()];
        for round in 0..rounds {
            for (c, cell) in cells.iter().enumerate() {
                let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
                for mode in order {
                    let samples = run(*cell, paddings[c], mode == 0, count(cell), &mut next).await;
                    rows[c][mode].push(samples);
                }
                copies[c].push(copy_ns(cell.size));
            }
        }
        println!(
            "| store | body | path | µs plain | µs sealed | × plain | CPU µs plain | CPU µs sealed | CPU µs added | bytes allocated added |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|");
        for (c, cell) in cells.iter().enumerate() {
            for (p, path) in PATHS.iter().enumerate() {
                let [sealed, plain] = [&rows[c][0], &rows[c][1]];
                let med = |rows: &Vec<[Sample; 2]>, f: fn(&Sample) -> f64| {
                    median(rows.iter().map(|r| f(&r[p])).collect())
                };
                let per_round = |f: &dyn Fn(&Sample, &Sample) -> f64| {
                    median((0..rounds).map(|r| f(&sealed[r][p], &plain[r][p])).collect())
                };
                println!(
                    "| {} | {} KiB | {} | {:.1} | {:.1} | {:.2}x | {:.1} | {:.1} | {:+.1} | {:+.0} |",
                    cell.store_name(),
                    cell.size / 1024,
                    if *path == Path::Fresh { "fresh" } else { "replay" },
                    med(plain, |s| s.wall) / 1e3,
                    med(sealed, |s| s.wall) / 1e3,
                    per_round(&|s, b| s.wall / b.wall),
                    med(plain, |s| s.cpu) / 1e3,
                    med(sealed, |s| s.cpu) / 1e3,
                    per_round(&|s, b| s.cpu - b.cpu) / 1e3,
                    per_round(&|s, b| s.bytes - b.bytes),
                );
            }
        }
        for (c, cell) in cells.iter().enumerate() {
            if cells[..c].iter().any(|o| o.size == cell.size) {
                continue;
            }
            println!(
                "one copy of a {} KiB body (allocate, copy, free): {:.2} µs",
                cell.size / 1024,
                median(copies[c].clone()) / 1e3
            );
        }
    });
}
