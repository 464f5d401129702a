//! Transient errors from real faults, and concurrent sweepers: a PostgreSQL backend terminated
//! mid-statement, a table locked past `lock_timeout`, a real InnoDB deadlock on the records
//! table (retried inside the store), several purgers racing claims on PostgreSQL and MariaDB.
//! Connections the server ended while they sat idle in the store's pool. (SQLite's writer lock
//! held past the busy timeout is in `store_outage.rs`.)

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::key::ScopedKey;
use idem_runtime::store::mysql::MySqlStore;
use idem_runtime::store::postgres::PostgresStore;
use idem_runtime::store::{
    Claim, ClaimRequest, Completion, ManualClock, Outcome, RecordState, Store, StoreError,
};
use sqlx::{Connection, Executor, Row};

use crate::support::*;

fn done() -> Completion {
    Completion::new(Outcome::Completed, 200, b"ok".to_vec())
}

fn assert_unavailable<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
    match r {
        Err(e @ StoreError::Unavailable { .. }) => assert!(e.is_transient(), "{e}"),
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
}

/// Runs `$probe` (an expression, `.await`ed inside) until it is `Some`, at most ~10 s.
macro_rules! wait_for {
    ($what:expr, $probe:expr) => {{
        let mut found = None;
        for _ in 0..400 {
            found = $probe;
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        found.unwrap_or_else(|| panic!("gave up waiting for {}", $what))
    }};
}

/// A statement of the store waits for a row lock; another connection terminates its backend
/// (`pg_terminate_backend`): `Unavailable`, and the store works again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_terminated_backend_is_unavailable() {
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let key = unique_key("terminated");
    let Claim::Acquired(lease) = store.claim(&req(&key, hash("a"))).await.unwrap() else {
        panic!("fresh key not free")
    };
    let mut locker = sqlx::PgConnection::connect(&url).await.unwrap();
    locker.execute("BEGIN").await.unwrap();
    sqlx::query("SELECT 1 FROM idem.idempotency_records WHERE key_hash = $1 FOR UPDATE")
        .bind(&key.hash()[..])
        .execute(&mut locker)
        .await
        .unwrap();
    let locker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut locker)
        .await
        .unwrap();
    let completing = {
        let (store, lease) = (store.clone(), lease.clone());
        tokio::spawn(async move { store.complete(&lease, &done()).await })
    };
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let victim: i32 = wait_for!(
        "the completion to wait for the row lock",
        sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"
        )
        .bind(locker_pid)
        .fetch_optional(&mut admin)
        .await
        .unwrap()
    );
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(victim)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(terminated);
    assert_unavailable(
        completing.await.unwrap(),
        "complete on a terminated backend",
    );
    locker.execute("ROLLBACK").await.unwrap();
    // The terminated statement changed nothing; the pool reconnects and the lease completes.
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state,
        RecordState::Processing
    );
    store.complete(&lease, &done()).await.unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state,
        RecordState::Completed
    );
}

/// Holds every connection of `pool` at once (at least `at_least`, so that the pool has that
/// many) and returns what `id_sql` (the server's id of the connection) answers on each.
async fn pooled_connection_ids<DB>(
    pool: &sqlx::Pool<DB>,
    at_least: u32,
    id_sql: &'static str,
) -> Vec<i64>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments: sqlx::IntoArguments<DB>,
    i64: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let n = pool.size().max(at_least);
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.acquire().await.unwrap());
    }
    assert_eq!(pool.size(), n, "every connection of the pool is held");
    let mut ids = Vec::new();
    for conn in &mut held {
        ids.push(
            sqlx::query_scalar(id_sql)
                .fetch_one(&mut **conn)
                .await
                .unwrap(),
        );
    }
    ids
}

/// Claims `n` fresh keys, one after another: every one must be acquired.
async fn claims_succeed(store: &dyn Store, n: usize) {
    for _ in 0..n {
        let key = unique_key("ended-idle");
        let claim = store.claim(&req(&key, hash("a"))).await;
        assert!(
            matches!(claim, Ok(Claim::Acquired(_))),
            "a claim after the pool's connections were ended: {claim:?}"
        );
    }
}

/// The store's pools check a connection before using it only when it sat idle for 500 ms or
/// more (`pool_options`: sqlx's check of every one costs a round trip per statement). The
/// server ends every connection of the pool while they sit idle (`pg_terminate_backend`); 0.6 s
/// later, as many claims succeed: each dead connection is found before a statement meets it, and
/// replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_ended_while_idle_are_replaced() {
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let ids = pooled_connection_ids(store.pool(), 3, "SELECT pg_backend_pid()::int8").await;
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    for id in &ids {
        let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1::int4)")
            .bind(id)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert!(ended, "backend {id} ended");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    claims_succeed(&store, ids.len()).await;
}

/// [`postgres_connections_ended_while_idle_are_replaced`] on MariaDB / MySQL (`KILL`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_connections_ended_while_idle_are_replaced() {
    let Some(url) = server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    let store = MySqlStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let ids =
        pooled_connection_ids(store.pool(), 3, "SELECT CAST(CONNECTION_ID() AS SIGNED)").await;
    let mut admin = sqlx::MySqlConnection::connect(&url).await.unwrap();
    for id in &ids {
        admin
            .execute(sqlx::AssertSqlSafe(format!("KILL {id}")))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    claims_succeed(&store, ids.len()).await;
}

/// The records table locked (`ACCESS EXCLUSIVE`) by another connection past the pool's
/// `lock_timeout`: claims, completions and reads are `Unavailable`; once the lock is gone the
/// store works again. In a database of its own: the lock would stall every other test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_locked_table_is_unavailable_until_released() {
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    let (url, _db) = private_database(&url, "locked").await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("lock_timeout", "200ms")]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    let store = PostgresStore::from_pool(pool);
    store.migrate().await.unwrap();
    let before = unique_key("locked-before");
    let Claim::Acquired(lease) = store.claim(&req(&before, hash("a"))).await.unwrap() else {
        panic!("fresh key not free")
    };
    let mut locker = sqlx::PgConnection::connect(&url).await.unwrap();
    locker.execute("BEGIN").await.unwrap();
    locker
        .execute("LOCK TABLE idem.idempotency_records IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let during = unique_key("locked-during");
    assert_unavailable(store.claim(&req(&during, hash("a"))).await, "claim");
    assert_unavailable(store.complete(&lease, &done()).await, "complete");
    assert_unavailable(store.get(&before).await, "get");
    assert_unavailable(store.purge_expired(10).await, "purge");
    locker.execute("COMMIT").await.unwrap();
    assert!(matches!(
        store.claim(&req(&during, hash("a"))).await.unwrap(),
        Claim::Acquired(_)
    ));
    store.complete(&lease, &done()).await.unwrap();
}

/// A real InnoDB deadlock between two claims of one key: a third transaction inserts the key
/// and holds it; both claims wait on its row with shared locks; it rolls back; both then want
/// the exclusive lock and InnoDB kills one as the deadlock victim. The store retries the
/// victim's statement, so both claims answer: one acquires, the other sees it in progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_deadlock_is_retried() {
    let Some(url) = server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    let (url, _db) = private_database(&url, "deadlock").await;
    let db = url.rsplit_once('/').unwrap().1.to_owned();
    let store = MySqlStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let mut admin = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let before = innodb_deadlocks(&mut admin).await;
    for round in 0..5 {
        let key = Arc::new(unique_key("deadlock"));
        let mut locker = sqlx::MySqlConnection::connect(&url).await.unwrap();
        locker.execute("BEGIN").await.unwrap();
        sqlx::query(
            "INSERT INTO idem_idempotency_records (key_hash, idem_key, request_hash, state, \
             operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at) \
             VALUES (?, 'locker', REPEAT('0', 64), 0, 'locker', 1, 1, 0, 0, 0, 0, 0)",
        )
        .bind(&key.hash()[..])
        .execute(&mut locker)
        .await
        .unwrap();
        let claims: Vec<_> = (0..2)
            .map(|_| {
                let (store, key) = (store.clone(), key.clone());
                tokio::spawn(async move { store.claim(&req(&key, hash("a"))).await })
            })
            .collect();
        wait_for!("both claims to wait for the locker's row", {
            // (MariaDB lists an autocommit statement waiting for a lock in the process list,
            // not always in INNODB_TRX.)
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = ? AND COMMAND = 'Execute' \
                 AND INFO LIKE 'INSERT INTO idem_idempotency_records%'",
            )
            .bind(&db)
            .fetch_one(&mut admin)
            .await
            .unwrap();
            (waiting == 2).then_some(())
        });
        locker.execute("ROLLBACK").await.unwrap();
        let (mut acquired, mut in_progress) = (0, 0);
        for c in claims {
            match c.await.unwrap() {
                Ok(Claim::Acquired(_)) => acquired += 1,
                Ok(Claim::InProgress { .. }) => in_progress += 1,
                other => panic!("round {round}: a deadlock victim was not retried: {other:?}"),
            }
        }
        assert_eq!((acquired, in_progress), (1, 1), "round {round}");
    }
    // The fault is real: InnoDB's latest deadlock is on this test's own table (a database no
    // other test uses), and its deadlock counter moved.
    let status: String = sqlx::query("SHOW ENGINE INNODB STATUS")
        .fetch_one(&mut admin)
        .await
        .unwrap()
        .get(2);
    let latest = status
        .split("LATEST DETECTED DEADLOCK")
        .nth(1)
        .expect("InnoDB reported no deadlock at all");
    assert!(
        latest.contains(&format!("`{db}`.`idem_idempotency_records`")),
        "the latest deadlock is not this test's: {latest}"
    );
    let after = innodb_deadlocks(&mut admin).await;
    assert!(after > before, "no deadlock counted: {before} -> {after}");
}

async fn innodb_deadlocks(admin: &mut sqlx::MySqlConnection) -> i64 {
    let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        .fetch_one(admin)
        .await
        .unwrap();
    row.get::<String, _>(1).parse().unwrap()
}

/// Several sweepers and several claimers at once on one server: no error (no deadlock between
/// purgers, none with claims), and exactly the expired records are purged.
async fn concurrent_purgers_and_claims(store: Arc<dyn Store>, clock: Arc<ManualClock>) {
    const EXPIRED: usize = 300;
    const LIVE: usize = 60;
    const PURGERS: usize = 4;
    const CLAIMERS: usize = 4;
    const FRESH_PER_CLAIMER: usize = 40;
    let short = Duration::from_secs(30);
    let mut expired = Vec::new();
    for i in 0..EXPIRED {
        let key = unique_key("sweep-expired");
        let Claim::Acquired(lease) = store
            .claim(&ClaimRequest::new(&key, hash("a"), short, short))
            .await
            .unwrap()
        else {
            panic!("fresh key not free")
        };
        if i % 2 == 0 {
            store.complete(&lease, &done()).await.unwrap();
        }
        expired.push(key);
    }
    let mut live = Vec::new();
    for _ in 0..LIVE {
        let key = unique_key("sweep-live");
        store
            .claim(&ClaimRequest::new(&key, hash("a"), short, TTL))
            .await
            .unwrap();
        live.push(key);
    }
    // The short records expire; the live ones' leases end (claims will take them over).
    clock.advance(Duration::from_secs(60));
    let live = Arc::new(live);
    let start = Arc::new(tokio::sync::Barrier::new(PURGERS + CLAIMERS));
    let purgers: Vec<_> = (0..PURGERS)
        .map(|_| {
            let (store, start) = (store.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let mut purged = 0;
                loop {
                    let n = store.purge_expired(7).await?;
                    purged += n;
                    if n == 0 {
                        return Ok::<u64, StoreError>(purged);
                    }
                }
            })
        })
        .collect();
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|c| {
            let (store, start, live) = (store.clone(), start.clone(), live.clone());
            tokio::spawn(async move {
                start.wait().await;
                let mut fresh: Vec<ScopedKey> = Vec::new();
                for i in 0..FRESH_PER_CLAIMER {
                    let key = unique_key("sweep-fresh");
                    let Claim::Acquired(lease) = store.claim(&req(&key, hash("a"))).await? else {
                        panic!("fresh key not free")
                    };
                    store.complete(&lease, &done()).await?;
                    fresh.push(key);
                    // Take over a live record's ended lease now and then.
                    if let Some(key) = live.get(c + i * CLAIMERS) {
                        match store.claim(&req(key, hash("a"))).await? {
                            Claim::Acquired(lease) => store.complete(&lease, &done()).await?,
                            other => panic!("live lease not taken over: {other:?}"),
                        }
                    }
                }
                Ok::<Vec<ScopedKey>, StoreError>(fresh)
            })
        })
        .collect();
    let mut purged = 0;
    for p in purgers {
        purged += p.await.unwrap().expect("a purger failed");
    }
    let mut fresh = Vec::new();
    for c in claimers {
        fresh.extend(c.await.unwrap().expect("a claimer failed"));
    }
    assert_eq!(purged, EXPIRED as u64, "exactly the expired records purged");
    assert_eq!(store.purge_expired(1000).await.unwrap(), 0);
    for key in &expired {
        // Gone physically: a claim of the key starts a brand-new record at fence 1.
        match store.claim(&req(key, hash("z"))).await.unwrap() {
            Claim::Acquired(lease) => assert_eq!(lease.fence, 1),
            other => panic!("{other:?}"),
        }
    }
    for key in live.iter().chain(&fresh) {
        assert!(store.get(key).await.unwrap().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_purgers_and_claims() {
    let Some(f) = postgres_private(idem_runtime::store::Clock::now(
        &idem_runtime::store::SystemClock,
    ))
    .await
    else {
        return;
    };
    concurrent_purgers_and_claims(f.store.clone(), f.clock.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_concurrent_purgers_and_claims() {
    let Some(f) = mysql_private(idem_runtime::store::Clock::now(
        &idem_runtime::store::SystemClock,
    ))
    .await
    else {
        return;
    };
    concurrent_purgers_and_claims(f.store.clone(), f.clock.clone()).await;
}
