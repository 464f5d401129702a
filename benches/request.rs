//! Cost per request (BENCHMARKS.md, "Cost per request"): the payment handler of
//! `examples/loadtest_server.rs` (the very same routes, `examples/loadtest_server/app.rs`)
//! called in process through its axum `Router` (`tower::ServiceExt::oneshot`, no sockets, one
//! thread): bare, under `#[idempotent]` with fresh keys and with replays, and over a store with
//! a connection of its own also with the statements idem sends written by hand (`/hand`), fresh
//! and replayed, and with the least a correct layer sends written by hand (`/minimal`); and under
//! the tower middleware with fresh keys, its fingerprint the body alone (`/layer`) and the body
//! with the routed path and the query (`/layer-q/..?..`), whose difference is printed below the
//! table. Per request: the CPU time of the process (the store's client included, and
//! SQLite's connection threads), the wall time, and the heap allocations and bytes counted by a
//! counting global allocator. Each round runs every path one after the other, the order
//! reversed every other round, and every ratio is taken within a round.
//!
//! ```sh
//! cargo bench --bench request                     # memory store, ROUNDS=15 REQUESTS=20000
//! STORE=postgres URL=postgres://app:app@127.0.0.1:5432/appdb \
//!     cargo bench --features postgres --bench request   # REQUESTS=2000 on a server store
//! ```
//!
//! `STORE` is `memory` (default), `sqlite` (a file in the temporary directory), `postgres`,
//! `mysql` or `redis` (`URL`, or `IDEM_BENCH_POSTGRES_URL` and the others); `ONLY="idem
//! fresh"` runs one path and prints nothing, for a profiler. No HTTP and no sockets but the
//! store's: what is left is the engine's own work per request (key, fingerprint, claim,
//! operation id, span, lease keeper, snapshot, completion, replay) against the same statements
//! by hand, which the loopback figures of "HTTP end to end" hide under the kernel's.
#![allow(missing_docs)]

use std::alloc::System;
use std::hint::black_box;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use cpu_time::ProcessTime;
use http_body_util::BodyExt;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tower::ServiceExt;

#[allow(dead_code)]
#[path = "../examples/loadtest_server/app.rs"]
mod app;

/// Counts every allocation (and reallocation) and the bytes asked for.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const BODY: &str = r#"{"amount": "100.00", "currency": "EUR", "order_id": "ord_184"}"#;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Path {
    Bare,
    MinFresh,
    HandFresh,
    IdemFresh,
    MinReplay,
    HandReplay,
    IdemReplay,
    LayerFresh,
    LayerQueryFresh,
}

impl Path {
    const ALL: [Path; 9] = [
        Path::Bare,
        Path::MinFresh,
        Path::HandFresh,
        Path::IdemFresh,
        Path::MinReplay,
        Path::HandReplay,
        Path::IdemReplay,
        Path::LayerFresh,
        Path::LayerQueryFresh,
    ];

    fn name(self) -> &'static str {
        match self {
            Path::Bare => "bare",
            Path::MinFresh => "minimal layer, fresh key",
            Path::HandFresh => "by hand, fresh key",
            Path::IdemFresh => "idem, fresh key",
            Path::MinReplay => "minimal layer, replay",
            Path::HandReplay => "by hand, replay",
            Path::IdemReplay => "idem, replay",
            Path::LayerFresh => "tower layer, fresh key",
            Path::LayerQueryFresh => "tower layer, path and query fingerprinted, fresh key",
        }
    }

    fn by_hand(self) -> bool {
        matches!(
            self,
            Path::HandFresh | Path::HandReplay | Path::MinFresh | Path::MinReplay
        )
    }

    fn route(self) -> &'static str {
        match self {
            Path::Bare => "/bare",
            Path::HandFresh | Path::HandReplay => "/hand",
            Path::MinFresh | Path::MinReplay => "/minimal",
            Path::IdemFresh | Path::IdemReplay => "/idem",
            Path::LayerFresh => "/layer",
            Path::LayerQueryFresh => "/layer-q/pay_184?mode=live&currency=EUR&note=a%20b",
        }
    }

    /// The hand-written twin of an idem path.
    fn twin(self) -> Option<Path> {
        match self {
            Path::IdemFresh => Some(Path::HandFresh),
            Path::IdemReplay => Some(Path::HandReplay),
            _ => None,
        }
    }

    /// The minimal layer's path an idem or hand-written path is held to.
    fn floor(self) -> Option<Path> {
        match self {
            Path::IdemFresh | Path::HandFresh => Some(Path::MinFresh),
            Path::IdemReplay | Path::HandReplay => Some(Path::MinReplay),
            _ => None,
        }
    }
}

/// A request of `path`; keys are unique to this process (`run`), so that a database kept
/// between runs never replays a fresh key.
fn request(path: Path, run: &str, n: u64) -> Request<Body> {
    let req = Request::post(path.route()).header("content-type", "application/json");
    let req = match path {
        Path::Bare => req,
        Path::HandFresh
        | Path::IdemFresh
        | Path::MinFresh
        | Path::LayerFresh
        | Path::LayerQueryFresh => req.header("idempotency-key", format!("{run}-{n}")),
        Path::HandReplay | Path::IdemReplay | Path::MinReplay => {
            req.header("idempotency-key", format!("{run}-r"))
        }
    };
    req.body(Body::from(BODY)).expect("a valid request")
}

async fn call(router: &Router, req: Request<Body>) {
    let resp = router.clone().oneshot(req).await.expect("infallible");
    // exact_replay answers a replay with the stored status.
    assert_eq!(resp.status(), StatusCode::CREATED, "{:?}", resp.headers());
    black_box(resp.into_body().collect().await.expect("a body").to_bytes());
}

/// One path, `n` requests, per request: wall-clock and CPU nanoseconds, allocations, bytes
/// allocated. Requests are built before the clocks and the counters start.
async fn measure(router: &Router, path: Path, run: &str, n: u64, next: &mut u64) -> Sample {
    let reqs: Vec<_> = (0..n)
        .map(|_| {
            *next += 1;
            request(path, run, *next)
        })
        .collect();
    let region = Region::new(GLOBAL);
    let cpu = ProcessTime::now();
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
    let store = std::env::var("STORE").unwrap_or_else(|_| "memory".to_owned());
    let server = store != "memory";
    let rounds = if quick { 1 } else { env("ROUNDS", 15) } as usize;
    let n = if quick {
        50
    } else {
        env("REQUESTS", if server { 2_000 } else { 20_000 })
    };
    let only = std::env::var("ONLY").ok();
    let paths: Vec<Path> = Path::ALL
        .into_iter()
        .filter(|p| server || !p.by_hand())
        .filter(|p| only.as_deref().is_none_or(|o| o == p.name()))
        .collect();
    assert!(!paths.is_empty(), "ONLY names no path of STORE={store}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let opened = app::open(&store, std::env::var("URL").ok(), false)
            .await
            .unwrap_or_else(|e| panic!("STORE={store}: {e}"));
        let router = app::router(app::App::new(opened));
        let run = format!(
            "rq-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        );
        let mut next = 0;
        for path in [Path::IdemReplay, Path::HandReplay, Path::MinReplay] {
            if server || !path.by_hand() {
                call(&router, request(path, &run, 0)).await;
            }
        }
        // Warm-up: every path once at a quarter of a round.
        for &path in &paths {
            measure(&router, path, &run, (n / 4).max(1), &mut next).await;
        }
        let mut rows: Vec<Vec<Sample>> = vec![Vec::new(); paths.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..paths.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                rows[i].push(measure(&router, paths[i], &run, n, &mut next).await);
            }
        }
        if only.is_some() {
            return; // profiling one path: no table
        }
        report(&store, &paths, &rows, rounds);
    });
}

/// The table: each path against `bare`, an idem path against its hand-written twin, and both
/// against the minimal layer.
fn report(store: &str, paths: &[Path], rows: &[Vec<Sample>], rounds: usize) {
    let at = |p: Path| paths.iter().position(|q| *q == p);
    let bare = at(Path::Bare).expect("bare is measured");
    println!("STORE={store}, {rounds} rounds");
    println!(
        "| path | CPU µs per request | × bare (CPU) | CPU µs over bare | × by hand (CPU) | CPU µs over by hand | wall µs per request | × by hand (wall) | × minimal (CPU) | × minimal (wall) | allocations per request | over by hand | bytes allocated per request |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let per_round = |i: usize, j: usize, f: &dyn Fn(&Sample, &Sample) -> f64| {
        median((0..rounds).map(|r| f(&rows[i][r], &rows[j][r])).collect())
    };
    for (i, path) in paths.iter().enumerate() {
        let med = |f: fn(&Sample) -> f64| median(rows[i].iter().map(f).collect());
        let twin = path.twin().and_then(at);
        let floor = path.floor().and_then(at);
        let vs = |other: Option<usize>, f: &dyn Fn(&Sample, &Sample) -> f64| {
            other.map_or("-".to_owned(), |j| format!("{:.3}", per_round(i, j, f)))
        };
        let vs_twin = |f: &dyn Fn(&Sample, &Sample) -> f64, spec: &str| {
            twin.map_or("-".to_owned(), |j| {
                let v = per_round(i, j, f);
                if spec == "x" {
                    format!("{v:.3}")
                } else {
                    format!("{v:+.2}")
                }
            })
        };
        println!(
            "| {} | {:.2} | {:.2} | {:+.2} | {} | {} | {:.1} | {} | {} | {} | {:.1} | {} | {:.0} |",
            path.name(),
            med(|s| s.cpu) / 1e3,
            per_round(i, bare, &|a, b| a.cpu / b.cpu),
            per_round(i, bare, &|a, b| a.cpu - b.cpu) / 1e3,
            vs_twin(&|a, b| a.cpu / b.cpu, "x"),
            vs_twin(&|a, b| (a.cpu - b.cpu) / 1e3, "+"),
            med(|s| s.wall) / 1e3,
            vs_twin(&|a, b| a.wall / b.wall, "x"),
            vs(floor, &|a, b| a.cpu / b.cpu),
            vs(floor, &|a, b| a.wall / b.wall),
            med(|s| s.allocs),
            vs_twin(&|a, b| a.allocs - b.allocs, "+"),
            med(|s| s.bytes),
        );
    }
    if let (Some(q), Some(l)) = (at(Path::LayerQueryFresh), at(Path::LayerFresh)) {
        println!(
            "\ntower layer, the routed path and the query in the fingerprint: {:+.2} µs CPU \
             ({:.3}x), {:+.1} allocations, {:+.0} bytes per fresh request (medians of per-round \
             differences)",
            per_round(q, l, &|a, b| a.cpu - b.cpu) / 1e3,
            per_round(q, l, &|a, b| a.cpu / b.cpu),
            per_round(q, l, &|a, b| a.allocs - b.allocs),
            per_round(q, l, &|a, b| a.bytes - b.bytes),
        );
    }
}
