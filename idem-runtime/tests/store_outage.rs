//! The database goes away mid-test: operations fail with `StoreError::Unavailable` (transient,
//! with a retry delay), nothing half-written survives, and the store recovers when the database
//! returns. Real servers, really stopped: `scripts/test` exports the commands that stop and
//! start them (`IDEM_TEST_{POSTGRES,MYSQL,REDIS}_{STOP,START}`).
//!
//! This is a test binary of its own because it stops the shared servers: cargo runs test
//! binaries one after another, so no other store test runs meanwhile.

#[path = "store/support.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::key::ScopedKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Lease, Outcome, Store, StoreError};
use support::servers::{Restart, sh};
use support::*;

fn assert_unavailable<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
    match r {
        Err(e) if e.is_transient() => {
            assert!(matches!(e, StoreError::Unavailable { .. }));
            assert!(e.retry_after().unwrap() > Duration::ZERO);
        }
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
}

/// Another connection's open transaction that inserted `key`: a claim of `key` waits for it.
enum Holder {
    Pg(sqlx::PgConnection),
    My(sqlx::MySqlConnection),
}

const RAW_INSERT: &str = "(key_hash, idem_key, request_hash, state, operation_id, fence, rev, \
    locked_at, lease_until, expire_at, created_at, updated_at) \
    VALUES ($1, 'holder', repeat('0', 64), 0, 'holder', 1, 1, 0, 0, 0, 0, 0)";

impl Holder {
    async fn insert(url: &str, key: &ScopedKey) -> Holder {
        use sqlx::{Connection, Executor};
        if url.starts_with("postgres") {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            c.execute("BEGIN").await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO idem.idempotency_records {RAW_INSERT}"
            )))
            .bind(&key.hash()[..])
            .execute(&mut c)
            .await
            .unwrap();
            Holder::Pg(c)
        } else {
            let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
            c.execute("BEGIN").await.unwrap();
            let sql = RAW_INSERT.replace("$1", "?");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO idem_idempotency_records {sql}"
            )))
            .bind(&key.hash()[..])
            .execute(&mut c)
            .await
            .unwrap();
            Holder::My(c)
        }
    }

    /// `true` once another session waits for this transaction's locks.
    async fn is_blocking(&mut self) -> bool {
        match self {
            Holder::Pg(c) => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM pg_stat_activity \
                 WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))",
                )
                .fetch_one(c)
                .await
                .unwrap()
                    > 0
            }
            Holder::My(c) => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE ID <> CONNECTION_ID() AND DB = DATABASE() AND COMMAND = 'Execute' \
                 AND INFO LIKE 'INSERT INTO idem_idempotency_records%'",
                )
                .fetch_one(c)
                .await
                .unwrap()
                    > 0
            }
        }
    }
}

async fn outage(store: Arc<dyn Store>, url: &str, stop: &str, start: &str) {
    let done = Completion::new(Outcome::Completed, 200, b"paid".to_vec());
    let before = unique_key("outage-before");
    let lease: Lease = match store.claim(&req(&before, hash("a"))).await.unwrap() {
        Claim::Acquired(l) => l,
        other => panic!("{other:?}"),
    };
    // A claim that reached the server and is running there when it stops: it waits for
    // another transaction that inserted the same key.
    let in_flight = unique_key("outage-in-flight");
    let mut holder = Holder::insert(url, &in_flight).await;
    let claiming = {
        let (store, key) = (store.clone(), in_flight.clone());
        tokio::spawn(async move { store.claim(&req(&key, hash("a"))).await })
    };
    let mut waiting = false;
    for _ in 0..400 {
        waiting = holder.is_blocking().await;
        if waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(waiting, "the claim never reached the server");

    sh(stop);
    let mut guard = Restart(Some(start.to_owned()));
    drop(holder);
    // Two outcomes are right, and which one happens is a race inside the server: the shutdown
    // terminates backends one by one, so the claim either dies with its backend (Unavailable:
    // it left nothing behind) or, when the holder's backend went first and rolled back, commits
    // before its own is terminated (Acquired: the claim happened, and must still be there after
    // the restart). Anything else, or a claim that is lost or doubled, is wrong.
    let committed = match claiming.await.unwrap() {
        Ok(Claim::Acquired(l)) => {
            assert!(l.fence == 1 && !l.took_over, "{l:?}");
            true
        }
        other => {
            assert_unavailable(other, "the claim running at shutdown");
            false
        }
    };
    let during = unique_key("outage-during");
    assert_unavailable(store.claim(&req(&during, hash("a"))).await, "claim");
    assert_unavailable(store.complete(&lease, &done).await, "complete");
    assert_unavailable(store.get(&before).await, "get");

    sh(start);
    guard.0 = None;
    // The pool reconnects by itself; give the server a moment to accept connections.
    let mut recovered = None;
    for _ in 0..100 {
        match store.claim(&req(&in_flight, hash("a"))).await {
            Ok(claim) => {
                recovered = Some(claim);
                break;
            }
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("not transient after restart: {e}"),
        }
    }
    match (committed, recovered) {
        // The claim that was interrupted left nothing behind (nor did the other transaction):
        // the key is free, a brand-new record at fence 1.
        (false, Some(Claim::Acquired(l))) => assert!(l.fence == 1 && !l.took_over, "{l:?}"),
        // The claim that committed is there, its lease still running.
        (true, Some(Claim::InProgress { request_hash, .. })) => {
            assert_eq!(request_hash, hash("a"))
        }
        other => {
            panic!("the claim running at shutdown was lost or left something behind: {other:?}")
        }
    }
    // The lease taken before the outage still completes, and replays.
    store.complete(&lease, &done).await.unwrap();
    match store
        .claim(&ClaimRequest::new(&before, hash("a"), LEASE, TTL))
        .await
        .unwrap()
    {
        Claim::Completed(rec) => assert_eq!(rec.body, b"paid"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_goes_away_and_returns() {
    let (Some(url), Some(stop), Some(start)) = (
        server_url("IDEM_TEST_POSTGRES_URL"),
        server_url("IDEM_TEST_POSTGRES_STOP"),
        server_url("IDEM_TEST_POSTGRES_START"),
    ) else {
        return;
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect(&url)
        .await
        .unwrap();
    let store = idem_runtime::store::postgres::PostgresStore::from_pool(pool);
    store.migrate().await.unwrap();
    outage(Arc::new(store), &url, &stop, &start).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_goes_away_and_returns() {
    let (Some(url), Some(stop), Some(start)) = (
        server_url("IDEM_TEST_MYSQL_URL"),
        server_url("IDEM_TEST_MYSQL_STOP"),
        server_url("IDEM_TEST_MYSQL_START"),
    ) else {
        return;
    };
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect(&url)
        .await
        .unwrap();
    let store = idem_runtime::store::mysql::MySqlStore::from_pool(pool);
    store.migrate().await.unwrap();
    outage(Arc::new(store), &url, &stop, &start).await;
}

/// Redis stops with a claim held up on the server (clients paused by `CLIENT PAUSE WRITE`, so
/// the claim script waits unexecuted): that claim, and every operation while the server is down,
/// fail with `Unavailable`; after the restart the store reconnects by itself, reloads its scripts
/// (a restarted server has none), and finds what was acknowledged before the stop (the
/// append-only file, fsynced per write, `scripts/db.sh`), and nothing of the claim that never
/// ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_goes_away_and_returns() {
    let (Some(url), Some(stop), Some(start)) = (
        server_url("IDEM_TEST_REDIS_URL"),
        server_url("IDEM_TEST_REDIS_STOP"),
        server_url("IDEM_TEST_REDIS_START"),
    ) else {
        return;
    };
    let _serial = REDIS_SETTINGS.lock().await;
    let store = redis_store().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let done = Completion::new(Outcome::Completed, 200, b"paid".to_vec());
    let before = unique_key("redis-outage-before");
    let Claim::Acquired(lease) = store.claim(&req(&before, hash("a"))).await.unwrap() else {
        panic!("fresh key not free")
    };

    // A claim that reached the server and waits there when it stops.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let in_flight = unique_key("redis-outage-in-flight");
    let claiming = {
        let (store, key) = (store.clone(), in_flight.clone());
        tokio::spawn(async move { store.claim(&req(&key, hash("a"))).await })
    };
    let mut waiting = false;
    for _ in 0..400 {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut admin)
            .await
            .unwrap();
        waiting = clients
            .lines()
            .any(|c| c.contains(" flags=b ") && c.contains(" cmd=evalsha "));
        if waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(waiting, "the claim never reached the server");

    sh(&stop);
    let mut guard = Restart(Some(start.clone()));
    assert_unavailable(claiming.await.unwrap(), "the claim waiting at shutdown");
    let during = unique_key("redis-outage-during");
    assert_unavailable(store.claim(&req(&during, hash("a"))).await, "claim");
    assert_unavailable(store.complete(&lease, &done).await, "complete");
    assert_unavailable(store.get(&before).await, "get");
    assert_unavailable(store.purge_expired(10).await, "purge");

    sh(&start);
    guard.0 = None;
    let mut recovered = None;
    for _ in 0..100 {
        match store.claim(&req(&in_flight, hash("a"))).await {
            Ok(claim) => {
                recovered = Some(claim);
                break;
            }
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("not transient after restart: {e}"),
        }
    }
    // The claim that never ran left nothing behind: a brand-new record at fence 1.
    match recovered {
        Some(Claim::Acquired(l)) => assert!(l.fence == 1 && !l.took_over, "{l:?}"),
        other => panic!("the claim held up at shutdown left something behind: {other:?}"),
    }
    // The lease acknowledged before the stop survived it, still completes, and replays.
    store.complete(&lease, &done).await.unwrap();
    match store.claim(&req(&before, hash("a"))).await.unwrap() {
        Claim::Completed(rec) => assert_eq!(rec.body, b"paid"),
        other => panic!("{other:?}"),
    }
}

/// A Redis server that evicts keys under memory pressure would drop records (a rerun of their
/// operations): `migrate()` refuses it with a configuration error, and accepts it again once the
/// policy is `noeviction`. In this binary because it changes the shared server's settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_evicting_server_is_refused() {
    let _serial = REDIS_SETTINGS.lock().await;
    let Some(store) = redis_store().await else {
        return;
    };
    let conn = store.connection().clone();
    let set = |policy: &'static str| {
        let mut conn = conn.clone();
        async move {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(policy)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    set("allkeys-lru").await;
    let refused = store.migrate().await;
    set("noeviction").await;
    match refused {
        Err(StoreError::Config { message, .. }) => {
            assert!(message.contains("allkeys-lru"), "{message}");
            assert!(message.contains("noeviction"), "{message}");
        }
        other => panic!("expected Config, got {other:?}"),
    }
    store.migrate().await.unwrap();
}

/// A Redis server at its `maxmemory` with `noeviction` refuses writes (`OOM`): a claim of a new
/// key and a completion are `Unavailable` (503, retry later) and write nothing, while a replay,
/// which writes nothing, is still answered; once memory is available again both go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_out_of_memory_is_unavailable() {
    let _serial = REDIS_SETTINGS.lock().await;
    let Some(store) = redis_store().await else {
        return;
    };
    let done = Completion::new(Outcome::Completed, 200, b"paid".to_vec());
    let replayed = unique_key("redis-oom-replayed");
    let Claim::Acquired(first) = store.claim(&req(&replayed, hash("a"))).await.unwrap() else {
        panic!("fresh key not free")
    };
    store.complete(&first, &done).await.unwrap();
    let pending = unique_key("redis-oom-pending");
    let Claim::Acquired(lease) = store.claim(&req(&pending, hash("a"))).await.unwrap() else {
        panic!("fresh key not free")
    };
    let conn = store.connection().clone();
    let set = |bytes: &'static str| {
        let mut conn = conn.clone();
        async move {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory")
                .arg(bytes)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    set("1").await;
    let fresh = unique_key("redis-oom-fresh");
    let claimed = store.claim(&req(&fresh, hash("a"))).await;
    let completed = store.complete(&lease, &done).await;
    let replay = store.claim(&req(&replayed, hash("a"))).await;
    let read = store.get(&pending).await;
    set("0").await;
    assert_unavailable(claimed, "claim at maxmemory");
    assert_unavailable(completed, "complete at maxmemory");
    match replay {
        Ok(Claim::Completed(rec)) => assert_eq!(rec.body, b"paid"),
        other => panic!("a replay writes nothing and must be answered: {other:?}"),
    }
    assert!(read.unwrap().is_some_and(|r| r.completed_at.is_none()));
    // Nothing was written meanwhile; now both go through.
    assert!(matches!(
        store.claim(&req(&fresh, hash("a"))).await.unwrap(),
        Claim::Acquired(l) if l.fence == 1
    ));
    store.complete(&lease, &done).await.unwrap();
}

/// Serializes the Redis tests of this binary: one stops the server, others change its settings.
static REDIS_SETTINGS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// SQLite has no server to stop: it "goes away" for writers when another connection holds the
/// write lock (`BEGIN IMMEDIATE`: a long migration, a stuck writer) longer than the busy
/// timeout. Readers go on (WAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_locked_then_released() {
    use sqlx::{Connection, Executor};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let options = idem_runtime::store::sqlite::SqliteStore::options(&path)
        .busy_timeout(Duration::from_millis(200));
    let store = idem_runtime::store::sqlite::SqliteStore::connect_with(options)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let done = Completion::new(Outcome::Completed, 200, b"paid".to_vec());
    let before = unique_key("locked-before");
    let Claim::Acquired(lease) = store.claim(&req(&before, hash("a"))).await.unwrap() else {
        panic!()
    };

    let mut locker = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    locker.execute("BEGIN IMMEDIATE").await.unwrap();
    let during = unique_key("locked-during");
    assert_unavailable(store.claim(&req(&during, hash("a"))).await, "claim");
    assert_unavailable(store.complete(&lease, &done).await, "complete");
    assert_unavailable(store.purge_expired(10).await, "purge");
    // A reader does not wait for the writer.
    assert!(store.get(&before).await.unwrap().is_some());
    locker.execute("COMMIT").await.unwrap();
    locker.close().await.unwrap();

    assert!(matches!(
        store.claim(&req(&during, hash("a"))).await.unwrap(),
        Claim::Acquired(_)
    ));
    store.complete(&lease, &done).await.unwrap();
    assert!(matches!(
        store.claim(&req(&before, hash("a"))).await.unwrap(),
        Claim::Completed(_)
    ));
}
