//! The bad day, end to end over HTTP: the database stalls (a TCP proxy that stops forwarding
//! without closing anything) or stops for real while requests run. Every request is answered
//! within a bounded time — the `Idem` handle's store timeout — with `503` + `Retry-After`, never
//! `500` or `429`; no handler runs without a claim; once the database is back the service
//! recovers without a restart, every key runs exactly once, and nothing completed before the
//! outage is lost. The atomic mode's completion lost to a stall, and `BEGIN`s given up on,
//! have scenarios of their own below.
//!
//! The tests stop the shared servers (`IDEM_TEST_{POSTGRES,MYSQL}_{STOP,START}`, exported by
//! `scripts/test`), so they run one at a time (`SERIAL`, held by the tests of `chaos` too), in
//! the `faults` binary: cargo runs test binaries one after another, so no other binary uses the
//! servers meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use idem::key::ScopedKey;
use idem::store::{Claim, ClaimRequest, Store};
use idem::{AnySql, Fingerprint, Idem, RequestHash, Snapshot, SqlTx, Tx, idempotent};
use sqlx::AssertSqlSafe;
use tower::ServiceExt;

use crate::backends::{Backend, backend_tests};
use crate::servers::{Restart, server_url, sh, unique};
use crate::sql_pool::SqlPool;

use crate::proxy;
use proxy::{StallProxy, host_port};

/// The servers are shared: one outage at a time, and none during a test of `chaos`.
use crate::SERIAL;

/// How long the engine waits for one answer of the store in these tests.
const STORE_TIMEOUT: Duration = Duration::from_millis(300);
/// A request that takes longer than this hangs: the bound is the store timeout (plus one more
/// for a completion), far below it — and below the pool's own acquire timeout (5 s), which
/// would otherwise be what ends a request during a stall.
const HANG: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------- the service

#[derive(Clone)]
struct App {
    idem: Idem,
    /// Handler runs per client key.
    runs: Arc<Mutex<HashMap<String, usize>>>,
    /// Handler runs without the protection of a claim (must stay 0: the handlers fail closed).
    unprotected: Arc<AtomicUsize>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct PlaceOrder {
    key: String,
    sku: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Order {
    #[snapshot(biz_no)]
    order_no: String,
    sku: String,
}

#[idempotent(scope = global, operation = "orders.place", lease = "2s")]
async fn place_order(
    State(app): State<App>,
    Json(req): Json<PlaceOrder>,
) -> (StatusCode, Json<Order>) {
    let op = idem::operation_id().expect("inside the handler");
    if !op.is_protected() {
        app.unprotected.fetch_add(1, Ordering::SeqCst);
    }
    *app.runs.lock().unwrap().entry(req.key.clone()).or_default() += 1;
    let order_no = format!("ord_{}", op.as_str().replace('-', ""));
    (
        StatusCode::CREATED,
        Json(Order {
            order_no,
            sku: req.sku,
        }),
    )
}

impl App {
    fn new(store: Arc<dyn Store>) -> App {
        App {
            idem: Idem::from_arc(store).with_store_timeout(STORE_TIMEOUT),
            runs: Arc::default(),
            unprotected: Arc::default(),
        }
    }

    fn router(&self) -> Router {
        Router::new()
            .route("/orders", post(place_order))
            .with_state(self.clone())
    }

    fn runs(&self, key: &str) -> usize {
        self.runs.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

struct Answer {
    status: StatusCode,
    retry_after: Option<u64>,
    replayed: bool,
    body: Vec<u8>,
}

/// One request; panics if it is not answered within [`HANG`].
async fn order(router: &Router, key: &str) -> Answer {
    let body = serde_json::json!({"key": key, "sku": "mug"}).to_string();
    let request = Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body))
        .unwrap();
    let response = tokio::time::timeout(HANG, router.clone().oneshot(request))
        .await
        .unwrap_or_else(|_| panic!("the request for {key} hung"))
        .unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap()
        .to_vec();
    Answer {
        status,
        retry_after,
        replayed,
        body,
    }
}

/// Sends `key` until it is answered with a success, honouring `Retry-After` on `409` and `503`
/// (at most 100 tries); the success.
async fn order_until_done(router: &Router, key: &str) -> Answer {
    for _ in 0..100 {
        let answer = order(router, key).await;
        match answer.status.as_u16() {
            200..=299 => return answer,
            409 | 503 => {
                let wait = answer.retry_after.expect("409 and 503 carry Retry-After");
                tokio::time::sleep(Duration::from_millis(100).min(Duration::from_secs(wait))).await;
            }
            other => panic!("{key}: unexpected {other}: {:?}", answer.body),
        }
    }
    panic!("{key}: no success after 100 tries");
}

/// What every request sees while the database is away: a bounded `503` with `Retry-After`.
fn assert_unavailable(answer: &Answer, key: &str) {
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{key}: {:?}",
        String::from_utf8_lossy(&answer.body)
    );
    assert!(answer.retry_after.is_some_and(|s| s >= 1), "{key}");
    let problem: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(
        problem["type"],
        "https://docs.rs/idem/latest/idem/problem/index.html#store-unavailable"
    );
}

/// The scenario, around `away` (which makes the database unreachable) and `back`.
async fn bad_day<A, AF, B, BF>(store: Arc<dyn Store>, away: A, back: B)
where
    A: FnOnce() -> AF,
    AF: std::future::Future<Output = ()>,
    B: FnOnce() -> BF,
    BF: std::future::Future<Output = ()>,
{
    let app = App::new(store);
    let router = app.router();
    // Completed before the outage.
    let before: Vec<String> = (0..5).map(|i| unique(&format!("before{i}"))).collect();
    let mut stored = HashMap::new();
    for key in &before {
        let answer = order(&router, key).await;
        assert_eq!(answer.status, StatusCode::CREATED);
        stored.insert(key.clone(), answer.body);
    }

    away().await;
    // Requests while the database is away, eight at a time: new keys and replays alike.
    let during: Vec<String> = (0..8).map(|i| unique(&format!("during{i}"))).collect();
    let answers = futures_join(
        during
            .iter()
            .chain(&before)
            .map(|key| {
                let router = router.clone();
                let key = key.clone();
                async move { (key.clone(), order(&router, &key).await) }
            })
            .collect(),
    )
    .await;
    for (key, answer) in &answers {
        assert_unavailable(answer, key);
    }
    for key in &during {
        assert_eq!(app.runs(key), 0, "{key} ran without a claim");
    }

    back().await;
    // The service recovers without a restart; every key runs exactly once.
    for key in &during {
        let answer = order_until_done(&router, key).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{key}");
        assert_eq!(app.runs(key), 1, "{key}");
    }
    // Nothing completed before the outage was lost: replayed byte for byte.
    for key in &before {
        let answer = order(&router, key).await;
        assert_eq!(answer.status, StatusCode::CREATED);
        assert!(answer.replayed, "{key}");
        assert_eq!(answer.body, stored[key], "{key}");
        assert_eq!(app.runs(key), 1, "{key}");
    }
    assert_eq!(app.unprotected.load(Ordering::SeqCst), 0);
}

/// Runs the futures concurrently; their outputs in order.
async fn futures_join<T>(
    futures: Vec<impl std::future::Future<Output = T> + Send + 'static>,
) -> Vec<T>
where
    T: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

// ---------------------------------------------------------------- stalls (no server stopped)

/// Runs `scenario` on the server of `backend` (PostgreSQL or MariaDB), alone ([`SERIAL`]); nothing
/// when the server is not configured.
async fn alone(backend: Backend, scenario: impl AsyncFnOnce(Backend, String)) {
    let _serial = SERIAL.lock().await;
    if let Some(url) = backend.url() {
        scenario(backend, url).await;
    }
}

/// A store of `backend` on `url` (its server, or a proxy in front of it), migrated.
async fn connect(backend: Backend, url: &str) -> Arc<dyn Store> {
    match backend {
        Backend::Postgres => postgres_store(url).await,
        Backend::Mysql => mysql_store(url).await,
        other => panic!("{} is not a SQL server", other.name()),
    }
}

async fn stall(backend: Backend, url: String) {
    let proxy = Arc::new(StallProxy::start(host_port(&url)).await);
    let store = connect(backend, &proxy.url_for(&url)).await;
    let (p1, p2) = (proxy.clone(), proxy.clone());
    bad_day(
        store,
        || async move { p1.stall(true) },
        || async move { p2.stall(false) },
    )
    .await;
}

async fn postgres_store(url: &str) -> Arc<dyn Store> {
    let store = idem::PostgresStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    Arc::new(store)
}

async fn mysql_store(url: &str) -> Arc<dyn Store> {
    let store = idem::MySqlStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    Arc::new(store)
}

backend_tests!(4, alone, [postgres, mysql], stall);

// ---------------------------------------------------------------- the atomic mode's completion lost

/// The service of the atomic mode's scenario: one row per run of the handler, in its
/// transaction.
#[derive(Clone)]
struct AtomicApp {
    idem: Idem,
    proxy: Arc<StallProxy>,
    table: &'static str,
    /// The operation id of every run of the handler.
    runs: Arc<Mutex<Vec<String>>>,
    /// Stall the database once the next run has written its row.
    stall_after_write: Arc<AtomicBool>,
}

impl FromRef<AtomicApp> for Idem {
    fn from_ref(app: &AtomicApp) -> Idem {
        app.idem.clone()
    }
}

#[idempotent(
    scope = global,
    operation = "orders.place_atomic",
    lease = "2s",
    transaction = tx
)]
async fn place_order_atomic(
    State(app): State<AtomicApp>,
    mut tx: Tx<AnySql>,
    Json(req): Json<PlaceOrder>,
) -> Result<(StatusCode, Json<Order>), StatusCode> {
    let op = idem::operation_id()
        .expect("inside the handler")
        .to_string();
    app.runs.lock().unwrap().push(op.clone());
    let sql = |values: &str| {
        AssertSqlSafe(format!(
            "INSERT INTO {} (operation_id, k) VALUES ({values})",
            app.table
        ))
    };
    let written = match &mut *tx {
        SqlTx::Postgres(tx) => sqlx::query(sql("$1, $2"))
            .bind(&op)
            .bind(&req.key)
            .execute(&mut **tx)
            .await
            .map(drop),
        SqlTx::MySql(tx) => sqlx::query(sql("?, ?"))
            .bind(&op)
            .bind(&req.key)
            .execute(&mut **tx)
            .await
            .map(drop),
        _ => unreachable!("PostgreSQL and MariaDB only"),
    };
    written.map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    if app.stall_after_write.swap(false, Ordering::SeqCst) {
        app.proxy.stall(true);
    }
    let order_no = format!("ord_{}", op.replace('-', ""));
    Ok((
        StatusCode::CREATED,
        Json(Order {
            order_no,
            sku: req.sku,
        }),
    ))
}

/// The atomic mode when its completion cannot be written: the handler wrote its row in the
/// transaction, then the database stalls before idem's completion `UPDATE` is answered. The
/// client is answered `503` + `Retry-After` within the store timeout — never the handler's
/// `201`, which describes a row that did not commit — and nothing of the attempt commits. Once
/// the database answers again, a retry runs the handler again under the **same** operation id,
/// and exactly one row and one stored result exist.
async fn atomic_completion_lost(backend: Backend, url: String) {
    const TABLE: &str = "bad_day_atomic";
    let proxy = Arc::new(StallProxy::start(host_port(&url)).await);
    let store = connect(backend, &proxy.url_for(&url)).await;
    let direct = SqlPool::connect(&url).await;
    direct
        .execute(format!(
            "CREATE TABLE IF NOT EXISTS {TABLE} \
             (operation_id VARCHAR(64) NOT NULL, k VARCHAR(128) NOT NULL)"
        ))
        .await;
    let app = AtomicApp {
        idem: Idem::from_arc(store).with_store_timeout(STORE_TIMEOUT),
        proxy: proxy.clone(),
        table: TABLE,
        runs: Arc::default(),
        stall_after_write: Arc::new(AtomicBool::new(true)),
    };
    let router = Router::new()
        .route("/orders", post(place_order_atomic))
        .with_state(app.clone());
    let key = unique("atomic-lost");
    let rows = |op: Option<&str>| {
        let (direct, key) = (&direct, &key);
        let op = op.map(|op| format!(" AND operation_id = '{op}'"));
        async move {
            direct
                .count(format!(
                    "SELECT COUNT(*) FROM {TABLE} WHERE k = '{key}'{}",
                    op.unwrap_or_default()
                ))
                .await
        }
    };

    let first = order(&router, &key).await;
    assert_unavailable(&first, &key);
    proxy.stall(false);
    assert_eq!(rows(None).await, 0, "the first attempt's row committed");

    let done = order_until_done(&router, &key).await;
    assert_eq!((done.status, done.replayed), (StatusCode::CREATED, false));
    let runs = app.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0], runs[1], "the retry ran under another operation id");
    assert_eq!(rows(None).await, 1);
    assert_eq!(rows(Some(&runs[0])).await, 1);
    let replay = order(&router, &key).await;
    assert_eq!(
        (replay.status, replay.replayed),
        (StatusCode::CREATED, true)
    );
    assert_eq!(replay.body, done.body);
}

backend_tests!(4, alone, [postgres, mysql], atomic_completion_lost);

// ---------------------------------------------------------------- a transaction given up on

/// How long a caller waits for an answer through the stalled proxy before it gives up.
const GIVE_UP: Duration = Duration::from_millis(300);

/// A transaction idem begins — the atomic mode's, before the handler runs, and MariaDB's purge
/// batch — whose `BEGIN` is given up on before the server answered (the store timeout, a
/// client that hung up) must not leave its pooled connection inside a transaction: the next
/// claim sent on that connection would run in it and never commit, and a retry would then claim
/// the key again, under another operation id. The pool has one connection, so the claim after
/// the stall runs on that very connection; another connection must see it.
async fn given_up<S: idem::store::TxStore + Store>(
    url: &str,
    connect: impl AsyncFnOnce(&str) -> S,
    steps: &[GivenUp],
) {
    let proxy = StallProxy::start(host_port(url)).await;
    let store = connect(&proxy.url_for(url)).await;
    store.migrate().await.unwrap();
    let observer = postgres_or_mysql(url).await;
    for &step in steps {
        let what = step.what();
        let key = ScopedKey::new::<&str>(&[], "begin-given-up", &unique("k")).unwrap();
        // The pool's one connection is open and idle, back in the pool (a released connection
        // is pinged first, in the background).
        store.get(&key).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.stall(true);
        let gave_up = match step {
            GivenUp::Begin => {
                tokio::time::timeout(GIVE_UP, async { S::__begin(&store).await.map(drop) })
                    .await
                    .is_err()
            }
            GivenUp::Purge => tokio::time::timeout(GIVE_UP, store.purge_expired(100))
                .await
                .is_err(),
        };
        assert!(gave_up, "{what}: answered through the stalled proxy");
        proxy.stall(false);
        let claim = ClaimRequest::new(
            &key,
            RequestHash::of_bytes(b"given up"),
            Duration::from_secs(30),
            Duration::from_secs(3600),
        );
        let claimed = tokio::time::timeout(HANG, store.claim(&claim))
            .await
            .unwrap_or_else(|_| panic!("{what}: the claim after it hung"))
            .unwrap();
        assert!(matches!(claimed, Claim::Acquired(_)), "{claimed:?}");
        assert!(
            observer.get(&key).await.unwrap().is_some(),
            "{what}: the claim after it did not commit (it ran inside the transaction given up on)"
        );
    }
}

/// What [`given_up`] gives up on while the database does not answer.
#[derive(Clone, Copy)]
enum GivenUp {
    /// The atomic mode's `BEGIN`, as the engine sends it.
    Begin,
    /// A purge batch (a transaction of its own on MariaDB).
    Purge,
}

impl GivenUp {
    fn what(self) -> &'static str {
        match self {
            GivenUp::Begin => "the atomic mode's BEGIN",
            GivenUp::Purge => "the purge's transaction",
        }
    }
}

/// A store on `url` (no proxy) that sees what the others committed.
async fn postgres_or_mysql(url: &str) -> Arc<dyn Store> {
    if url.starts_with("postgres") {
        postgres_store(url).await
    } else {
        mysql_store(url).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_begin_given_up() {
    let _serial = SERIAL.lock().await;
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    let connect = async |url: &str| {
        let pool = idem::PostgresStore::pool_options()
            .max_connections(1)
            .test_before_acquire(false);
        idem::PostgresStore::connect_with_pool(pool, url.parse().unwrap())
            .await
            .unwrap()
    };
    given_up(&url, connect, &[GivenUp::Begin]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_begin_given_up() {
    let _serial = SERIAL.lock().await;
    let Some(url) = server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    let connect = async |url: &str| {
        let pool = idem::MySqlStore::pool_options()
            .max_connections(1)
            .test_before_acquire(false);
        idem::MySqlStore::connect_with_pool(pool, url.parse().unwrap())
            .await
            .unwrap()
    };
    given_up(&url, connect, &[GivenUp::Begin, GivenUp::Purge]).await;
}

// ---------------------------------------------------------------- the server stopped

/// The server of `backend` stopped for real (`IDEM_TEST_<SERVER>_STOP`) and started again
/// (`..._START`); nothing when those are not configured.
async fn stopped(backend: Backend, url: String) {
    let (Some(stop), Some(start)) = (
        server_url(&backend.var("STOP").unwrap()),
        server_url(&backend.var("START").unwrap()),
    ) else {
        return;
    };
    let store = connect(backend, &url).await;
    let guard = Arc::new(Mutex::new(Restart(None)));
    let (g1, g2) = (guard.clone(), guard.clone());
    let (stop2, start2) = (stop.clone(), start.clone());
    bad_day(
        store,
        || async move {
            sh(&stop2);
            g1.lock().unwrap().0 = Some(start2);
        },
        || async move {
            sh(&start);
            g2.lock().unwrap().0 = None;
        },
    )
    .await;
    drop(stop);
}

backend_tests!(4, alone, [postgres, mysql], stopped);
