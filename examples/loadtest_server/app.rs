//! The service of `examples/loadtest_server.rs`, and of the in-process paths of
//! `benches/request.rs`: one small payment handler, bare, under `#[idempotent]` and with the
//! statements idem sends written by hand (`by_hand.rs`), the least a correct layer sends
//! written by hand (`minimal.rs`), and the floors it is measured against.
//! Both measure the very same handlers: [`open`] the store, then [`router`].

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use idem::axum::Json;
use idem::store::Store;
use idem::{Fingerprint, HandlerConfig, Idem, IdempotencyLayer, ReplayCache, Snapshot, idempotent};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

#[path = "by_hand.rs"]
mod by_hand;
#[path = "minimal.rs"]
mod minimal;

pub type BoxError = Box<dyn Error + Send + Sync>;

/// The request: a small payment.
#[derive(Deserialize, Fingerprint)]
pub struct CreatePayment {
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    amount: Decimal,
    currency: String,
    order_id: String,
}

/// The response.
#[derive(Serialize, Snapshot)]
pub struct Payment {
    #[snapshot(biz_no)]
    payment_id: String,
    status: &'static str,
    amount: Decimal,
    currency: String,
}

/// The store's pool, for the floors.
#[derive(Clone)]
pub enum Pool {
    Memory,
    /// The store's reading pool, and the one connection `/hand` writes through, held between
    /// writes and taken in turn, as the store holds its writer connection: SQLite takes one
    /// writer at a time.
    Sqlite {
        reads: sqlx::SqlitePool,
        writes: Arc<tokio::sync::Mutex<sqlx::SqliteConnection>>,
    },
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
            Pool::Sqlite { reads, .. } => Ok(sqlx::query(SQL).execute(reads).await.map(drop)?),
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
pub type Statements = Option<Arc<dyn Fn() -> u64 + Send + Sync>>;

#[derive(Clone)]
pub struct App {
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

/// The payment of `req`: the work every route and front does.
pub fn payment(req: CreatePayment) -> Payment {
    Payment {
        payment_id: format!("pay_{}", req.order_id),
        status: "succeeded",
        amount: req.amount,
        currency: req.currency,
    }
}

/// The work every route does: the payment answered.
fn charge(req: CreatePayment) -> (StatusCode, Json<Payment>) {
    (StatusCode::CREATED, Json(payment(req)))
}

/// The key of a hand-written route's request (`/hand`, `/minimal`): its `Idempotency-Key`
/// scoped to `operation`, as `#[idempotent(scope = global)]` scopes it (`None`: answer `400`).
fn client_key(headers: &axum::http::HeaderMap, operation: &str) -> Option<idem::key::ScopedKey> {
    let client = headers.get("idempotency-key")?.to_str().ok()?;
    idem::key::ScopedKey::new::<&str>(&[], operation, client).ok()
}

/// Whether a hand-written route's MariaDB claim `INSERT` took the key: `false` when it failed on
/// a duplicate key (SQLSTATE `23000`, the record exists: read it), any other failure an error.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn inserted<T>(result: Result<T, sqlx::Error>) -> Result<bool, sqlx::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("23000") => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// A hand-written route's JSON answer, marked `Idempotent-Replayed: true` when `replayed`.
fn json_answer(status: StatusCode, body: Vec<u8>, replayed: bool) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut res = axum::response::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if replayed {
        res = res.header("idempotent-replayed", "true");
    }
    res.body(axum::body::Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The fields of [`CreatePayment`] the tower middleware fingerprints (it sees no typed request).
fn payment_spec() -> idem::json::Spec {
    idem::json::Spec::from_json_str(
        r#"{"amount": "decimal", "currency": "any", "order_id": "any"}"#,
    )
    .expect("a valid spec")
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

/// How long the `/slow` handlers take: a call to a payment processor.
pub const SLOW: core::time::Duration = core::time::Duration::from_millis(100);

async fn slow_bare(Json(req): Json<CreatePayment>) -> (StatusCode, Json<Payment>) {
    tokio::time::sleep(SLOW).await;
    charge(req)
}

/// A duplicate meets the first attempt in flight for 100 ms: `409` + `Retry-After`.
#[idempotent(scope = global, contract = "exact_replay")]
async fn slow(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    app.runs.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(SLOW).await;
    charge(req)
}

/// The same, but a duplicate waits for the first attempt (up to 2 s) and is replayed.
#[idempotent(scope = global, contract = "exact_replay", wait = "2s")]
async fn slow_wait(
    State(app): State<App>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    app.runs.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(SLOW).await;
    charge(req)
}

async fn stats(State(app): State<App>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "statements": app.statements.as_ref().map(|count| count()),
        "handler_runs": app.runs.load(Ordering::Relaxed),
    }))
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "redis")),
    allow(dead_code)
)]
fn env_url(name: &str) -> Result<String, BoxError> {
    std::env::var(name).map_err(|_| format!("give --url or set {name}").into())
}

/// Opens the store named `store` (`memory`, `sqlite`, `postgres`, `mysql`, `redis`) at `url`
/// (for SQLite a file path; unset: a file in the temporary directory, or the
/// `IDEM_BENCH_*_URL` of the server stores) and migrates it.
pub async fn open(
    store: &str,
    url: Option<String>,
    one_round_trip_replays: bool,
) -> Result<Opened, BoxError> {
    let opened: Opened = match store {
        "memory" => (Arc::new(idem::MemoryStore::new()), Pool::Memory, None),
        "sqlite" => {
            let path = url.unwrap_or_else(|| {
                let dir = std::env::temp_dir();
                dir.join(format!("idem-loadtest-{}.db", std::process::id()))
                    .display()
                    .to_string()
            });
            let store = idem::SqliteStore::open(&path).await?;
            let writes = sqlx::ConnectOptions::connect(&idem::SqliteStore::options(&path)).await?;
            let writes = Arc::new(tokio::sync::Mutex::new(writes));
            let pool = Pool::Sqlite {
                reads: store.pool().clone(),
                writes,
            };
            let count = store.clone();
            (
                Arc::new(store),
                pool,
                counter(move || count.statement_count()),
            )
        }
        "postgres" => postgres(url).await?,
        "mysql" => mysql(url, one_round_trip_replays).await?,
        "redis" => redis_store(url).await?,
        _ => {
            return Err(
                format!("unknown store {store}: memory, sqlite, postgres, mysql or redis").into(),
            );
        }
    };
    opened.0.migrate().await?;
    minimal::create(&opened.1).await?;
    Ok(opened)
}

/// The store, its pool and its statement counter.
pub type Opened = (Arc<dyn Store>, Pool, Statements);

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

impl App {
    /// The handle over the store.
    pub fn idem(&self) -> Idem {
        self.idem.clone()
    }

    /// How many times the idempotent handler ran, shared.
    pub fn runs(&self) -> Arc<AtomicU64> {
        self.runs.clone()
    }

    /// The service's state over an opened store.
    pub fn new((store, pool, statements): Opened) -> App {
        App {
            idem: Idem::from_arc(store),
            pool,
            statements,
            runs: Arc::default(),
        }
    }
}

/// Every route of the service (`/floor`, `/floor2`, `/hand` and `/minimal` only over a store with a
/// connection of its own).
pub fn router(app: App) -> Router {
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
        .route("/slow-bare", post(slow_bare))
        .route("/slow", post(slow))
        .route("/slow-wait", post(slow_wait))
        .route("/stats", get(stats))
        .merge(
            Router::new()
                .route("/idem-cached", post(idem_payment))
                .with_state(cached),
        )
        .merge(
            Router::new().route("/layer", post(bare)).layer(
                IdempotencyLayer::new(app.idem.clone(), payment_spec())
                    .config(HandlerConfig::for_route())
                    .global()
                    .ignore_query(),
            ),
        )
        .merge(
            Router::new().route("/layer-q/{id}", post(bare)).layer(
                IdempotencyLayer::new(app.idem.clone(), payment_spec())
                    .config(HandlerConfig::new("payments.create.q"))
                    .global(),
            ),
        );
    if !matches!(app.pool, Pool::Memory) {
        router = router
            .route("/floor", post(floor))
            .route("/floor2", post(floor2))
            .route("/hand", post(by_hand::by_hand))
            .route("/minimal", post(minimal::minimal));
    }
    router.with_state(app)
}
