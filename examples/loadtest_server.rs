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
//! | `POST /bare` | the handler alone: parse the JSON payment with `idem::http::Json`, answer `201` with a small JSON body |
//! | `POST /floor` | the same + one `SELECT 1` on the store's pool (SQL stores; `PING` on the Redis store's connection): the one-statement floor |
//! | `POST /floor2` | the same + two `SELECT 1` (or `PING`), one after the other: the two-statement floor |
//! | `POST /idem` | the same handler under `#[idempotent(scope = global, contract = "exact_replay")]` |
//! | `POST /hand` | the same handler with the statements `/idem` sends its store written by hand around it (`loadtest_server/by_hand.rs`): the fair floor of the layer |
//! | `POST /idem-cached` | the same, through a handle with a replay cache over the same store (`ReplayCache::new(100_000)`, defaults otherwise): replays of records it has seen cost no statement |
//! | `GET /stats` | `{"statements": n, "handler_runs": n}`: the SQL statements the store has sent (`statement_count()`; `null` for memory) and the times the `/idem` handler ran, since start |
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
//! The store is migrated at start; keys are never cleaned up (the load generator makes them
//! unique per run).

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use idem::http::Json;
use idem::store::Store;
use idem::{Fingerprint, Idem, ReplayCache, Snapshot, idempotent};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

#[path = "loadtest_server/by_hand.rs"]
mod by_hand;

type BoxError = Box<dyn Error + Send + Sync>;

/// The request: a small payment.
#[derive(Deserialize, Fingerprint)]
struct CreatePayment {
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    amount: Decimal,
    currency: String,
    order_id: String,
}

/// The response.
#[derive(Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    payment_id: String,
    status: &'static str,
    amount: Decimal,
    currency: String,
}

/// The store's pool, for the floors.
#[derive(Clone)]
enum Pool {
    Memory,
    Sqlite(sqlx::SqlitePool),
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres(sqlx::PgPool),
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    MySql(sqlx::MySqlPool),
    #[cfg(feature = "redis")]
    Redis(idem::store::redis::RedisConnection),
}

impl Pool {
    /// One `SELECT 1` on the pool (`PING` on Redis, nothing for memory).
    async fn select_one(&self) -> Result<(), BoxError> {
        const SQL: &str = "SELECT 1";
        match self {
            Pool::Memory => Ok(()),
            Pool::Sqlite(p) => Ok(sqlx::query(SQL).execute(p).await.map(drop)?),
            Pool::Postgres(p) => Ok(sqlx::query(SQL).execute(p).await.map(drop)?),
            Pool::MySql(p) => Ok(sqlx::query(SQL).execute(p).await.map(drop)?),
            #[cfg(feature = "redis")]
            Pool::Redis(c) => {
                let mut c = c.clone();
                let () = redis::cmd("PING").query_async(&mut c).await?;
                Ok(())
            }
        }
    }
}

/// The store's statement counter (`None` for memory, which sends none).
type Statements = Option<Arc<dyn Fn() -> u64 + Send + Sync>>;

#[derive(Clone)]
struct App {
    idem: Idem,
    pool: Pool,
    statements: Statements,
    /// How many times the `/idem` handler ran.
    runs: Arc<AtomicU64>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

/// The work every route does: the payment answered.
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

async fn floor(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> Result<(StatusCode, Json<Payment>), StatusCode> {
    app.pool
        .select_one()
        .await
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    Ok(charge(req))
}

async fn floor2(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> Result<(StatusCode, Json<Payment>), StatusCode> {
    for _ in 0..2 {
        app.pool
            .select_one()
            .await
            .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    }
    Ok(charge(req))
}

#[idempotent(scope = global, contract = "exact_replay")]
async fn idem_payment(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    app.runs.fetch_add(1, Ordering::Relaxed);
    charge(req)
}

async fn stats(State(app): State<App>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "statements": app.statements.as_ref().map(|count| count()),
        "handler_runs": app.runs.load(Ordering::Relaxed),
    }))
}

struct Args {
    store: String,
    url: Option<String>,
    addr: String,
    threads: Option<usize>,
    one_round_trip_replays: bool,
}

const USAGE: &str = "usage: loadtest_server [--store memory|sqlite|postgres|mysql|redis] [--url URL] \
                     [--addr HOST:PORT] [--threads N] [--one-round-trip-replays]";

fn args() -> Result<Args, BoxError> {
    let mut args = Args {
        store: "memory".to_owned(),
        url: None,
        addr: "127.0.0.1:8080".to_owned(),
        threads: None,
        one_round_trip_replays: false,
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
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown flag {flag}\n{USAGE}").into()),
        }
    }
    Ok(args)
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "redis")),
    allow(dead_code)
)]
fn env_url(name: &str) -> Result<String, BoxError> {
    std::env::var(name).map_err(|_| format!("give --url or set {name}").into())
}

async fn open(args: &Args) -> Result<Opened, BoxError> {
    let (store, url) = (args.store.as_str(), args.url.clone());
    Ok(match store {
        "memory" => (Arc::new(idem::MemoryStore::new()), Pool::Memory, None),
        "sqlite" => {
            let path = url.unwrap_or_else(|| {
                let dir = std::env::temp_dir();
                dir.join(format!("idem-loadtest-{}.db", std::process::id()))
                    .display()
                    .to_string()
            });
            let store = idem::SqliteStore::open(&path).await?;
            let pool = Pool::Sqlite(store.pool().clone());
            let count = store.clone();
            (
                Arc::new(store),
                pool,
                counter(move || count.statement_count()),
            )
        }
        "postgres" => postgres(url).await?,
        "mysql" => mysql(url, args.one_round_trip_replays).await?,
        "redis" => redis_store(url).await?,
        _ => return Err(format!("unknown store {store}\n{USAGE}").into()),
    })
}

/// The store, its pool and its statement counter.
type Opened = (Arc<dyn Store>, Pool, Statements);

fn counter(count: impl Fn() -> u64 + Send + Sync + 'static) -> Statements {
    Some(Arc::new(count))
}

#[cfg(feature = "postgres")]
async fn postgres(url: Option<String>) -> Result<Opened, BoxError> {
    let url = url.map_or_else(|| env_url("IDEM_BENCH_POSTGRES_URL"), Ok)?;
    let store = idem::PostgresStore::connect(&url).await?;
    let pool = Pool::Postgres(store.pool().clone());
    let count = store.clone();
    Ok((
        Arc::new(store),
        pool,
        counter(move || count.statement_count()),
    ))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: Option<String>) -> Result<Opened, BoxError> {
    Err("--store postgres needs `--features postgres`".into())
}

#[cfg(feature = "mysql")]
async fn mysql(url: Option<String>, one_round_trip_replays: bool) -> Result<Opened, BoxError> {
    let url = url.map_or_else(|| env_url("IDEM_BENCH_MYSQL_URL"), Ok)?;
    let mut store = idem::MySqlStore::connect(&url).await?;
    if one_round_trip_replays {
        store = store.with_one_round_trip_replays();
    }
    let pool = Pool::MySql(store.pool().clone());
    let count = store.clone();
    Ok((
        Arc::new(store),
        pool,
        counter(move || count.statement_count()),
    ))
}

#[cfg(not(feature = "mysql"))]
async fn mysql(_: Option<String>, _: bool) -> Result<Opened, BoxError> {
    Err("--store mysql needs `--features mysql`".into())
}

#[cfg(feature = "redis")]
async fn redis_store(url: Option<String>) -> Result<Opened, BoxError> {
    let url = url.map_or_else(|| env_url("IDEM_BENCH_REDIS_URL"), Ok)?;
    let store = idem::RedisStore::connect(&url).await?;
    let pool = Pool::Redis(store.connection().clone());
    let count = store.clone();
    Ok((
        Arc::new(store),
        pool,
        counter(move || count.command_count()),
    ))
}

#[cfg(not(feature = "redis"))]
async fn redis_store(_: Option<String>) -> Result<Opened, BoxError> {
    Err("--store redis needs `--features redis`".into())
}

fn main() -> Result<(), BoxError> {
    let args = args()?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        runtime.worker_threads(n);
    }
    runtime.enable_all().build()?.block_on(serve(args))
}

async fn serve(args: Args) -> Result<(), BoxError> {
    let (store, pool, statements) = open(&args).await?;
    store.migrate().await?;
    let app = App {
        idem: Idem::from_arc(store),
        pool,
        statements,
        runs: Arc::default(),
    };
    let cached = App {
        idem: app
            .idem
            .clone()
            .with_replay_cache(ReplayCache::new(100_000)),
        ..app.clone()
    };
    let mut router = Router::new()
        .route("/bare", post(bare))
        .route("/idem", post(idem_payment))
        .route("/stats", get(stats))
        .merge(
            Router::new()
                .route("/idem-cached", post(idem_payment))
                .with_state(cached),
        );
    if !matches!(app.pool, Pool::Memory) {
        router = router
            .route("/floor", post(floor))
            .route("/floor2", post(floor2))
            .route("/hand", post(by_hand::by_hand));
    }
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    eprintln!(
        "loadtest_server: listening on http://{} (store: {})",
        listener.local_addr()?,
        args.store
    );
    axum::serve(listener, router.with_state(app)).await?;
    Ok(())
}
