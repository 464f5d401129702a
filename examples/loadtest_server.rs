//! The service under test of `scripts/bench-http` (BENCHMARKS.md, "HTTP end to end"): one small
//! payment handler served on loopback, bare and under `#[idempotent]`, with the floors it is
//! measured against.
//!
//! ```sh
//! cargo run --release --example loadtest_server -- --store memory --addr 127.0.0.1:8080
//! cargo run --release --example loadtest_server --features postgres,mysql -- \
//!     --store postgres --url postgres://app:app@127.0.0.1:5432/appdb
//! ```
//!
//! | route | what runs |
//! |---|---|
//! | `POST /bare` | the handler alone: parse the JSON payment with `idem::axum::Json`, answer `201` with a small JSON body |
//! | `POST /floor` | the same + one `SELECT 1` on the store's pool (SQL stores; `PING` on the Redis store's connection): the one-statement floor |
//! | `POST /floor2` | the same + two `SELECT 1` (or `PING`), one after the other: the two-statement floor |
//! | `POST /idem` | the same handler under `#[idempotent(scope = global, contract = "exact_replay")]` |
//! | `POST /hand` | the same handler with the statements `/idem` sends its store written by hand around it (`loadtest_server/by_hand.rs`): the fair floor of the layer |
//! | `POST /minimal` | the same handler with the least a correct layer sends, written by hand for each backend on a table of its own (`loadtest_server/minimal.rs`): the second floor, what idem's statements are held to |
//! | `POST /layer` | the handler under the tower middleware (`IdempotencyLayer`, `HandlerConfig::for_route()`, `ignore_query()`): the body alone fingerprinted |
//! | `POST /layer-q/{id}?..` | the same under a named operation with the query kept: the routed path and the query fingerprinted with the body |
//! | `POST /idem-cached` | the same, through a handle with a replay cache over the same store (`ReplayCache::new(100_000)`, defaults otherwise): replays of records it has seen cost no statement |
//! | `POST /slow-bare` | the handler after a 100 ms pause (a processor call) |
//! | `POST /slow` | the same under `#[idempotent]`: a duplicate that meets it in flight is answered `409` |
//! | `POST /slow-wait` | the same with `wait = "2s"`: a duplicate waits for it and is replayed |
//! | `GET /stats` | `{"statements": n, "handler_runs": n}`: the SQL statements the store has sent (`statement_count()`; `null` for memory) and the times the `/idem`, `/slow` and `/slow-wait` handlers ran, since start |
//!
//! A fresh key costs the store two statements (claim, complete), a replay one (the claim returns
//! the completed row): `/floor2` and `/floor` are what the same number of round trips to the same
//! pool costs without idem. `/stats` is read by the load generator around each burst
//! (`loadgen --stats`, BENCHMARKS.md, "Contention"): statements per request, handler runs per
//! key.
//!
//! | flag | default | |
//! |---|---|---|
//! | `--store memory\|sqlite\|postgres\|mysql\|redis` | `memory` | the store (`postgres`, `mysql` and `redis` need `--features postgres` / `mysql` / `redis`) |
//! | `--url URL` | `IDEM_BENCH_POSTGRES_URL` / `IDEM_BENCH_MYSQL_URL` / `IDEM_BENCH_REDIS_URL`; for SQLite a file in the temporary directory | the database (SQLite: a file path) |
//! | `--addr HOST:PORT` | `127.0.0.1:8080` | the listening address |
//! | `--threads N` | the number of CPUs | tokio worker threads |
//! | `--one-round-trip-replays` | off | MariaDB: claim with `MySqlStore::with_one_round_trip_replays` |
//!
//! | `--front axum\|actix\|grpc` | `axum` | `actix` (`--features actix`): `/bare` and `/idem` on actix-web (`loadtest_server/actix.rs`); `grpc` (`--features tonic`): the same payment as a tonic method, bare and idempotent (`loadtest_server/grpc.rs`) |
//!
//! The store is migrated at start; keys are never cleaned up (the load generator makes them
//! unique per run).

#[cfg(feature = "actix")]
#[path = "loadtest_server/actix.rs"]
mod actix;
#[path = "loadtest_server/app.rs"]
mod app;
#[cfg(feature = "tonic")]
#[path = "loadtest_server/grpc.rs"]
mod grpc;

use app::{App, BoxError};

struct Args {
    store: String,
    url: Option<String>,
    addr: String,
    threads: Option<usize>,
    one_round_trip_replays: bool,
    front: String,
}

const USAGE: &str = "usage: loadtest_server [--store memory|sqlite|postgres|mysql|redis] [--url URL] \
                     [--addr HOST:PORT] [--threads N] [--one-round-trip-replays] \
                     [--front axum|actix|grpc]";

fn args() -> Result<Args, BoxError> {
    let mut args = Args {
        store: "memory".to_owned(),
        url: None,
        addr: "127.0.0.1:8080".to_owned(),
        threads: None,
        one_round_trip_replays: false,
        front: "axum".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--store" => args.store = value()?,
            "--url" => args.url = Some(value()?),
            "--addr" => args.addr = value()?,
            "--threads" => args.threads = Some(value()?.parse()?),
            "--one-round-trip-replays" => args.one_round_trip_replays = true,
            "--front" => args.front = value()?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}").into()),
        }
    }
    Ok(args)
}

/// Runs the server; a failure (a flag, the store, the address) is one line and exit code 1.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadtest_server: {}", idem::store::Chain(&*e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), BoxError> {
    let args = args()?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    match args.front.as_str() {
        "axum" | "grpc" => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
            .block_on(serve(args)),
        "actix" => serve_actix(args, threads),
        other => Err(format!("unknown front {other}\n{USAGE}").into()),
    }
}

/// The service's state over the store `args` name, opened and migrated.
async fn open(args: &Args) -> Result<App, BoxError> {
    let opened = app::open(&args.store, args.url.clone(), args.one_round_trip_replays).await?;
    Ok(App::new(opened))
}

/// The line `scripts/bench-http` and a reader see once the server listens.
fn listening(addr: std::net::SocketAddr, args: &Args) {
    eprintln!(
        "loadtest_server: listening on http://{addr} (store: {}, front: {})",
        args.store, args.front
    );
}

async fn serve(args: Args) -> Result<(), BoxError> {
    let app = open(&args).await?;
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    listening(listener.local_addr()?, &args);
    if args.front == "grpc" {
        return serve_grpc(listener, app).await;
    }
    axum::serve(listener, app::router(app)).await?;
    Ok(())
}

#[cfg(feature = "tonic")]
async fn serve_grpc(listener: tokio::net::TcpListener, app: App) -> Result<(), BoxError> {
    grpc::serve(listener, app.idem(), app.runs()).await
}

#[cfg(not(feature = "tonic"))]
async fn serve_grpc(_: tokio::net::TcpListener, _: App) -> Result<(), BoxError> {
    Err("--front grpc needs `--features tonic`".into())
}

/// actix-web runs its own runtimes: one per worker thread, and the system's, where the store is
/// opened (its pool lives as long as the server).
#[cfg(feature = "actix")]
fn serve_actix(args: Args, workers: usize) -> Result<(), BoxError> {
    actix_web::rt::System::new().block_on(async move {
        let app = open(&args).await?;
        let listener = std::net::TcpListener::bind(&args.addr)?;
        listening(listener.local_addr()?, &args);
        actix::serve(listener, workers, app.idem()).await
    })
}

#[cfg(not(feature = "actix"))]
fn serve_actix(_: Args, _: usize) -> Result<(), BoxError> {
    Err("--front actix needs `--features actix`".into())
}
