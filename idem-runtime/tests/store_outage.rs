//! The database goes away mid-test: operations fail with `StoreError::Unavailable` (transient,
//! with a retry delay), nothing half-written survives, and the store recovers when the database
//! returns. Real servers, really stopped: `scripts/test` exports the commands that stop and
//! start them (`IDEM_TEST_{POSTGRES,MYSQL}_{STOP,START}`).
//!
//! This is a test binary of its own because it stops the shared servers: cargo runs test
//! binaries one after another, so no other store test runs meanwhile.

#[path = "store/support.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::{Claim, ClaimRequest, Completion, Lease, Outcome, Store, StoreError};
use support::*;

fn sh(var: &str) -> Option<String> {
    server_url(var)
}

fn run(cmd: &str) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .status()
        .unwrap();
    assert!(status.success(), "`{cmd}` failed");
}

/// Restarts the server when the test fails half-way, so later test binaries still have it.
struct Restart(Option<String>);
impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(cmd) = self.0.take() {
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(&cmd)
                .status();
        }
    }
}

fn assert_unavailable<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
    match r {
        Err(e) if e.is_transient() => {
            assert!(matches!(e, StoreError::Unavailable { .. }));
            assert!(e.retry_after().unwrap() > Duration::ZERO);
        }
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
}

async fn outage(store: Arc<dyn Store>, stop: &str, start: &str) {
    let done = Completion::new(Outcome::Completed, 200, b"paid".to_vec());
    let before = unique_key("outage-before");
    let lease: Lease = match store.claim(&req(&before, hash("a"))).await.unwrap() {
        Claim::Acquired(l) => l,
        other => panic!("{other:?}"),
    };

    run(stop);
    let mut guard = Restart(Some(start.to_owned()));
    let during = unique_key("outage-during");
    assert_unavailable(store.claim(&req(&during, hash("a"))).await, "claim");
    assert_unavailable(store.complete(&lease, &done).await, "complete");
    assert_unavailable(store.get(&before).await, "get");

    run(start);
    guard.0 = None;
    // The pool reconnects by itself; give the server a moment to accept connections.
    let mut recovered = None;
    for _ in 0..100 {
        match store.claim(&req(&during, hash("a"))).await {
            Ok(claim) => {
                recovered = Some(claim);
                break;
            }
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("not transient after restart: {e}"),
        }
    }
    // The claim that failed during the outage left nothing behind: the key is free.
    assert!(
        matches!(recovered, Some(Claim::Acquired(_))),
        "{recovered:?}"
    );
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
        sh("IDEM_TEST_POSTGRES_STOP"),
        sh("IDEM_TEST_POSTGRES_START"),
    ) else {
        return;
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect(&url)
        .await
        .unwrap();
    let store = idem_runtime::store::PostgresStore::from_pool(pool);
    store.migrate().await.unwrap();
    outage(Arc::new(store), &stop, &start).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_goes_away_and_returns() {
    let (Some(url), Some(stop), Some(start)) = (
        server_url("IDEM_TEST_MYSQL_URL"),
        sh("IDEM_TEST_MYSQL_STOP"),
        sh("IDEM_TEST_MYSQL_START"),
    ) else {
        return;
    };
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect(&url)
        .await
        .unwrap();
    let store = idem_runtime::store::MySqlStore::from_pool(pool);
    store.migrate().await.unwrap();
    outage(Arc::new(store), &stop, &start).await;
}

/// SQLite has no server to stop: it "goes away" when another process holds the database lock
/// longer than the busy timeout (a long migration, a backup, a stuck writer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_locked_then_released() {
    use sqlx::{Connection, Executor};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let options =
        idem_runtime::store::SqliteStore::options(&path).busy_timeout(Duration::from_millis(200));
    let store = idem_runtime::store::SqliteStore::connect_with(options)
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
    locker.execute("BEGIN EXCLUSIVE").await.unwrap();
    let during = unique_key("locked-during");
    assert_unavailable(store.claim(&req(&during, hash("a"))).await, "claim");
    assert_unavailable(store.complete(&lease, &done).await, "complete");
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
