//! The atomic mode (`#[idempotent(transaction = tx)]`) on SQLite, PostgreSQL and MariaDB: the
//! handler's business row and its stored result commit in one transaction, or neither exists.
//!
//! * a request commits exactly one row and one stored result; its retry replays without
//!   running the handler;
//! * the request future dropped between the business write and the commit: no row, no result;
//!   the retry takes the record over at once (same operation id) and commits exactly one row;
//! * a handler answer that is not stored (a 422 releases the record) rolls its row back; a
//!   failure that is stored (a 500 under `exact_replay`) commits with its row;
//! * a handler that answers after one of its statements failed: on PostgreSQL, which aborts
//!   the transaction, a stored failure is stored on its own (no row) and a success is `503`;
//!   elsewhere the row and the failure commit together;
//! * a zombie — an attempt whose lease was taken over while it ran — cannot commit its row: its
//!   fenced completion matches no record inside its transaction (PostgreSQL, MariaDB, and
//!   SQLite before the zombie's first write); on SQLite a transaction that has written holds
//!   the write lock, so a takeover waits for it and replays its result instead.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use idem::store::RecordState;
use idem::{AnySql, Fingerprint, Idem, Snapshot, SqlTx, Tx, idempotent};
use tokio::sync::Notify;
use tower::ServiceExt;

use crate::backends::{Fixture, backend_tests, on_clocked_store};
use crate::servers::unique;
use crate::sql_pool::SqlPool;

/// What the next run of the handler does after writing its row.
#[derive(Clone, Default)]
enum Then {
    /// Answer 201.
    #[default]
    Created,
    /// Tell `wrote`, wait for `go`, then answer 201.
    Pause { wrote: Arc<Notify>, go: Arc<Notify> },
    /// Tell `wrote` and wait for `go` before writing the row, then answer 201.
    PauseBeforeWrite { wrote: Arc<Notify>, go: Arc<Notify> },
    /// Answer this status (not stored by the default policy).
    Fail(StatusCode),
    /// Send a statement that fails (a table that does not exist), ignore its error, and answer
    /// this status.
    AfterFailedStatement(StatusCode),
}

#[derive(Clone)]
struct App {
    idem: Idem,
    table: String,
    runs: Arc<AtomicU32>,
    then: Arc<Mutex<Vec<Then>>>,
}

impl FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone()
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct Order {
    item: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Placed {
    #[snapshot(biz_no)]
    order_id: String,
    run: u32,
}

/// Inserts a row of `table` for the current operation in `tx`, whichever database it is on.
async fn insert(tx: &mut SqlTx, table: &str, item: &str) -> Result<(), sqlx::Error> {
    let op = idem::operation_id()
        .expect("inside the handler")
        .to_string();
    let values = if matches!(tx, SqlTx::Postgres(_)) {
        "($1, $2)"
    } else {
        "(?, ?)"
    };
    let sql = format!("INSERT INTO {table} (operation_id, item) VALUES {values}");
    macro_rules! insert_on {
        ($tx:expr) => {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(op)
                .bind(item)
                .execute(&mut **$tx)
                .await
                .map(|_| ())?
        };
    }
    match tx {
        SqlTx::Postgres(tx) => insert_on!(tx),
        SqlTx::MySql(tx) => insert_on!(tx),
        SqlTx::Sqlite(tx) => insert_on!(tx),
        _ => unreachable!("every SQL store is compiled in these tests"),
    }
    Ok(())
}

/// A statement that fails on every database (its error is ignored).
async fn fail_a_statement(tx: &mut SqlTx) {
    macro_rules! fail_on {
        ($tx:expr) => {{
            let failed = sqlx::query("INSERT INTO idem_no_such_table (x) VALUES (1)")
                .execute(&mut **$tx)
                .await;
            assert!(failed.is_err());
        }};
    }
    match tx {
        SqlTx::Postgres(tx) => fail_on!(tx),
        SqlTx::MySql(tx) => fail_on!(tx),
        SqlTx::Sqlite(tx) => fail_on!(tx),
        _ => unreachable!("every SQL store is compiled in these tests"),
    }
}

#[idempotent(scope = global, transaction = tx)]
async fn place(
    State(app): State<App>,
    mut tx: Tx<AnySql>,
    Json(order): Json<Order>,
) -> Result<(StatusCode, Json<Placed>), StatusCode> {
    let run = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let then = app.then.lock().unwrap().pop().unwrap_or_default();
    if let Then::PauseBeforeWrite { wrote, go } = &then {
        wrote.notify_one();
        go.notified().await;
    }
    insert(&mut tx, &app.table, &order.item)
        .await
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    match then {
        Then::Created | Then::PauseBeforeWrite { .. } => {}
        Then::Pause { wrote, go } => {
            wrote.notify_one();
            go.notified().await;
        }
        Then::Fail(status) => return Err(status),
        Then::AfterFailedStatement(status) => {
            fail_a_statement(&mut tx).await;
            if !status.is_success() {
                return Err(status);
            }
        }
    }
    let order_id = format!("ord_{}", idem::operation_id().unwrap());
    Ok((StatusCode::CREATED, Json(Placed { order_id, run })))
}

const SCHEMA: &str = "(operation_id VARCHAR(64) NOT NULL, item VARCHAR(64) NOT NULL)";

/// The business table beside the records of a store under test.
trait Business {
    /// A service over the store, with a business table of its own.
    async fn app(&self) -> App;
    /// The rows of `app`'s business table.
    async fn rows(&self, app: &App) -> i64;
}

impl Business for Fixture {
    async fn app(&self) -> App {
        let table = unique("atomic");
        self.sql_pool()
            .execute(format!("CREATE TABLE {table} {SCHEMA}"))
            .await;
        App {
            idem: Idem::from_arc(self.store.clone()),
            table,
            runs: Arc::default(),
            then: Arc::default(),
        }
    }

    async fn rows(&self, app: &App) -> i64 {
        self.sql_pool()
            .count(format!("SELECT COUNT(*) FROM {}", app.table))
            .await
    }
}

fn router(app: &App) -> Router {
    Router::new()
        .route("/orders", post(place))
        .with_state(app.clone())
}

fn request(key: &str) -> Request<Body> {
    Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(r#"{"item":"book"}"#))
        .unwrap()
}

async fn send(app: &App, key: &str) -> Response {
    router(app).oneshot(request(key)).await.unwrap()
}

async fn body(resp: Response) -> serde_json::Value {
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// The state of the record of `key` (the operation is the route, the scope global).
async fn record_state(app: &App, key: &str) -> Option<RecordState> {
    let scoped = idem::key::ScopedKey::new::<&str>(&[], "POST /orders", key).unwrap();
    let record = app.idem.store().get(&scoped).await.unwrap();
    record.map(|r| r.state)
}

/// Waits for the paused handler to have written its row (or fails the test instead of hanging).
async fn wrote_within(wrote: &Notify) {
    tokio::time::timeout(Duration::from_secs(10), wrote.notified())
        .await
        .expect("the handler ran and wrote its row");
}

/// `resp` is a replay (`Idempotent-Replayed: true`) of a stored `status`.
fn assert_replayed(resp: &Response, status: StatusCode) {
    assert_eq!(resp.status(), status);
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
}

/// Sends `key` until the answer is not `409` (an abandoned lease is ended by a spawned task).
async fn send_until_not_in_progress(app: &App, key: &str) -> Response {
    for _ in 0..100 {
        let resp = send(app, key).await;
        if resp.status() != StatusCode::CONFLICT {
            return resp;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("`{key}` stayed in progress");
}

async fn commits_rows_and_result_together(backend: &Fixture) {
    // Unique: the servers keep the records of earlier runs.
    let key = unique("k");
    let app = backend.app().await;
    let first = send(&app, &key).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first = body(first).await;
    assert_eq!(backend.rows(&app).await, 1);
    assert_eq!(record_state(&app, &key).await, Some(RecordState::Completed));
    let retry = send(&app, &key).await;
    assert_replayed(&retry, StatusCode::CREATED);
    assert_eq!(body(retry).await, first);
    assert_eq!(app.runs.load(Ordering::SeqCst), 1);
    assert_eq!(backend.rows(&app).await, 1);
}

async fn dropped_between_write_and_commit(backend: &Fixture) {
    // Unique: the servers keep the records of earlier runs.
    let key = unique("k");
    let app = backend.app().await;
    let (wrote, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    app.then.lock().unwrap().push(Then::Pause {
        wrote: wrote.clone(),
        go,
    });
    let first = tokio::spawn({
        let (app, key) = (app.clone(), key.clone());
        async move { send(&app, &key).await }
    });
    wrote_within(&wrote).await;
    // The row is written in the open transaction; the client goes away.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert_eq!(
        record_state(&app, &key).await,
        Some(RecordState::Processing),
        "the record stays, with its operation id, for the retry"
    );
    assert_eq!(backend.rows(&app).await, 0, "the row rolled back");

    let retry = send_until_not_in_progress(&app, &key).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    let retried = body(retry).await;
    assert_eq!(retried["run"], 2);
    assert_eq!(backend.rows(&app).await, 1, "exactly one row");
    assert_eq!(record_state(&app, &key).await, Some(RecordState::Completed));
    let replay = send(&app, &key).await;
    assert_replayed(&replay, StatusCode::CREATED);
    assert_eq!(body(replay).await, retried);
    assert_eq!(backend.rows(&app).await, 1);
}

async fn unstored_answers_roll_back(backend: &Fixture) {
    // Unique: the servers keep the records of earlier runs.
    let key = unique("k");
    let app = backend.app().await;
    // 422 from the handler: the operation never started (released), its row rolled back.
    app.then
        .lock()
        .unwrap()
        .push(Then::Fail(StatusCode::UNPROCESSABLE_ENTITY));
    let refused = send(&app, &key).await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(backend.rows(&app).await, 0);
    assert_eq!(record_state(&app, &key).await, None, "released");
    // A 500 is stored as a failure under exact_replay: it commits with its row, and replays.
    app.then
        .lock()
        .unwrap()
        .push(Then::Fail(StatusCode::INTERNAL_SERVER_ERROR));
    let failed = send(&app, &key).await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(backend.rows(&app).await, 1);
    assert_eq!(
        record_state(&app, &key).await,
        Some(RecordState::FailedStored)
    );
    let replay = send(&app, &key).await;
    assert_replayed(&replay, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.runs.load(Ordering::SeqCst), 2);
    assert_eq!(backend.rows(&app).await, 1);
}

/// The handler's statement fails after its row was written, and the handler answers anyway.
/// PostgreSQL aborts the whole transaction at the failed statement: the row is gone and the
/// completion cannot be written in it. A failure answer (a 500, stored under `exact_replay`)
/// describes no rows, so it is stored on its own and replayed; a success answer would describe
/// a row that does not exist, so its client gets `503` and the retry runs the handler again,
/// under the same operation id. MariaDB and SQLite roll back only the failed statement: the
/// row and the stored 500 commit together.
async fn failed_statement_then_answer(backend: &Fixture) {
    let aborts = matches!(backend.sql_pool(), SqlPool::Postgres(_));
    let key = unique("k");
    let app = backend.app().await;
    app.then.lock().unwrap().push(Then::AfterFailedStatement(
        StatusCode::INTERNAL_SERVER_ERROR,
    ));
    let failed = send(&app, &key).await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(backend.rows(&app).await, if aborts { 0 } else { 1 });
    assert_eq!(
        record_state(&app, &key).await,
        Some(RecordState::FailedStored)
    );
    let replay = send(&app, &key).await;
    assert_replayed(&replay, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.runs.load(Ordering::SeqCst), 1);
    if !aborts {
        return;
    }
    let key = unique("k");
    app.then
        .lock()
        .unwrap()
        .push(Then::AfterFailedStatement(StatusCode::CREATED));
    let refused = send(&app, &key).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(backend.rows(&app).await, 0);
    assert_eq!(
        record_state(&app, &key).await,
        Some(RecordState::Processing),
        "abandoned: its operation id stays for the retry"
    );
    let done = send_until_not_in_progress(&app, &key).await;
    assert_eq!(done.status(), StatusCode::CREATED);
    assert_eq!(app.runs.load(Ordering::SeqCst), 3);
    assert_eq!(backend.rows(&app).await, 1);
}

/// The zombie's fenced completion matches no record inside its transaction, so its row never
/// commits; it answers what a retry sees (the takeover's result). PostgreSQL and MariaDB: the
/// zombie wrote its row before the takeover.
async fn zombie_cannot_commit(backend: &Fixture) {
    zombie(backend, false).await;
}

/// SQLite: a transaction that has written holds the write lock, so the zombie here is one that
/// was taken over before its first write.
async fn zombie_taken_over_before_writing_cannot_commit(backend: &Fixture) {
    zombie(backend, true).await;
}

async fn zombie(backend: &Fixture, before_write: bool) {
    // Unique: the servers keep the records of earlier runs.
    let key = unique("k");
    let app = backend.app().await;
    let (wrote, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (w, g) = (wrote.clone(), go.clone());
    app.then.lock().unwrap().push(if before_write {
        Then::PauseBeforeWrite { wrote: w, go: g }
    } else {
        Then::Pause { wrote: w, go: g }
    });
    let zombie = tokio::spawn({
        let (app, key) = (app.clone(), key.clone());
        async move { send(&app, &key).await }
    });
    wrote_within(&wrote).await;
    // Its lease runs out (by the store's clock) and a retry takes the operation over.
    backend.clock().advance(Duration::from_secs(31));
    let takeover = send(&app, &key).await;
    assert_eq!(takeover.status(), StatusCode::CREATED);
    let taken = body(takeover).await;
    assert_eq!(taken["run"], 2);
    assert_eq!(backend.rows(&app).await, 1);

    go.notify_one();
    let zombie = zombie.await.unwrap();
    assert_replayed(&zombie, StatusCode::CREATED);
    assert_eq!(
        body(zombie).await,
        taken,
        "the zombie answers the stored result"
    );
    assert_eq!(
        backend.rows(&app).await,
        1,
        "the zombie's row never committed"
    );
}

/// SQLite: a transaction that has written holds the write lock, so a takeover cannot happen
/// until it ends: the retry waits, the first attempt commits, and the retry replays its result.
async fn sqlite_takeover_waits_for_the_transaction(backend: &Fixture) {
    // Unique: the servers keep the records of earlier runs.
    let key = unique("k");
    let app = backend.app().await;
    let (wrote, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    app.then.lock().unwrap().push(Then::Pause {
        wrote: wrote.clone(),
        go: go.clone(),
    });
    let first = tokio::spawn({
        let (app, key) = (app.clone(), key.clone());
        async move { send(&app, &key).await }
    });
    wrote_within(&wrote).await;
    backend.clock().advance(Duration::from_secs(31));
    let retry = tokio::spawn({
        let (app, key) = (app.clone(), key.clone());
        async move { send(&app, &key).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    go.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first = body(first).await;
    let retry = retry.await.unwrap();
    assert_replayed(&retry, StatusCode::CREATED);
    assert_eq!(body(retry).await, first);
    assert_eq!(app.runs.load(Ordering::SeqCst), 1);
    assert_eq!(backend.rows(&app).await, 1);
}

/// A handle over another store: `Tx<AnySql>` cannot begin, the handler does not run, `503`.
#[tokio::test]
async fn memory_store_cannot_begin_a_transaction() {
    // Unique: the servers keep the records of earlier runs.
    let key = unique("k");
    let app = App {
        idem: Idem::new(idem::MemoryStore::new()),
        table: "unused".into(),
        runs: Arc::default(),
        then: Arc::default(),
    };
    let resp = send(&app, &key).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(app.runs.load(Ordering::SeqCst), 0);
}

backend_tests!(
    2,
    on_clocked_store,
    [sqlite, postgres, mysql],
    commits_rows_and_result_together,
    failed_statement_then_answer,
    dropped_between_write_and_commit,
    unstored_answers_roll_back,
);
backend_tests!(
    2,
    on_clocked_store,
    [sqlite],
    zombie_taken_over_before_writing_cannot_commit,
    sqlite_takeover_waits_for_the_transaction,
);
backend_tests!(2, on_clocked_store, [postgres, mysql], zombie_cannot_commit);

/// On a MariaDB Galera cluster: the handler's transaction on node 1 has written its row when
/// another node commits a row with the same primary key. Certification rolls the handler's
/// transaction back (1213 at its commit): its row and its result together, so the client is
/// answered `503` + `Retry-After`, and the record keeps its operation id with its lease ended.
/// Once the other row is gone, the retry runs the handler again under the same operation id and
/// commits one row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn galera_certification_failure_rolls_back_row_and_result() {
    let Some(urls) = crate::servers::server_url("IDEM_TEST_GALERA_URLS") else {
        return;
    };
    let urls: Vec<&str> = urls.split(',').collect();
    let store = idem::MySqlStore::connect(urls[0]).await.unwrap();
    assert!(store.is_galera());
    idem::store::Store::migrate(&store).await.unwrap();
    let table = unique("atomic_galera");
    let item = unique("item");
    let (first, other) = (
        store.pool().clone(),
        sqlx::MySqlPool::connect(urls[1]).await.unwrap(),
    );
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (operation_id VARCHAR(64) NOT NULL, item VARCHAR(64) PRIMARY KEY)"
    )))
    .execute(&first)
    .await
    .unwrap();
    let app = App {
        idem: Idem::new(store),
        table: table.clone(),
        runs: Arc::default(),
        then: Arc::default(),
    };
    let (wrote, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    app.then.lock().unwrap().push(Then::Pause {
        wrote: wrote.clone(),
        go: go.clone(),
    });
    let key = unique("k");
    let order = |item: &str| {
        Request::post("/orders")
            .header("content-type", "application/json")
            .header("idempotency-key", key.as_str())
            .body(Body::from(format!(r#"{{"item":"{item}"}}"#)))
            .unwrap()
    };
    let attempt = tokio::spawn({
        let (router, request) = (router(&app), order(&item));
        async move { router.oneshot(request).await.unwrap() }
    });
    wrote_within(&wrote).await;
    // Another node commits the same primary key first.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} (operation_id, item) VALUES ('elsewhere', ?)"
    )))
    .bind(&item)
    .execute(&other)
    .await
    .unwrap();
    go.notify_one();
    let refused = attempt.await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SET STATEMENT wsrep_sync_wait = 1 FOR SELECT operation_id FROM {table}"
    )))
    .fetch_all(&first)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [("elsewhere".to_owned(),)],
        "only the other node's row"
    );
    assert_eq!(
        record_state(&app, &key).await,
        Some(RecordState::Processing),
        "the record waits for the retry"
    );

    sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table}")))
        .execute(&other)
        .await
        .unwrap();
    let retry = router(&app).oneshot(order(&item)).await.unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(body(retry).await["run"], 2);
    let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SET STATEMENT wsrep_sync_wait = 1 FOR SELECT operation_id FROM {table}"
    )))
    .fetch_all(&first)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "one row, the retry's");
    let scoped = idem::key::ScopedKey::new::<&str>(&[], "POST /orders", &key).unwrap();
    let record = app.idem.store().get(&scoped).await.unwrap().unwrap();
    assert_eq!(
        rows[0].0, record.operation_id,
        "the retry ran under the first attempt's operation id"
    );
    other.close().await;
}
