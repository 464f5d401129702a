//! Fixtures of the store tests: one store per test, a manual clock, unique keys.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_runtime::RequestHash;
use idem_runtime::key::ScopedKey;
use idem_runtime::store::{ClaimRequest, Clock, ManualClock, MemoryStore, Store, Timestamp};

#[path = "../../../tests/common/servers.rs"]
pub mod servers;
pub use servers::server_url;

/// A store under test, the clock it reads, and whatever must live as long as it.
pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub clock: Arc<ManualClock>,
    pub backend: &'static str,
    pub _guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Fixture {
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

/// A key no other test (nor an earlier run against the same server) uses.
pub fn unique_key(label: &str) -> ScopedKey {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let client = format!(
        "{label}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    ScopedKey::new(&["tenant-t", "user-u"], "POST /test", &client).unwrap()
}

pub fn hash(s: &str) -> RequestHash {
    RequestHash::of_bytes(s.as_bytes())
}

pub const LEASE: Duration = Duration::from_secs(30);
pub const TTL: Duration = Duration::from_secs(3600);

pub fn req<'a>(key: &'a ScopedKey, h: RequestHash) -> ClaimRequest<'a> {
    ClaimRequest::new(key, h, LEASE, TTL)
}

pub async fn memory(start: Timestamp) -> Option<Fixture> {
    let clock = Arc::new(ManualClock::new(start));
    Some(Fixture {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
        backend: "memory",
        _guard: None,
    })
}

pub async fn sqlite(start: Timestamp) -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(&dir.path().join("idem.db")).await;
    let clock = Arc::new(ManualClock::new(start));
    Some(Fixture {
        store: Arc::new(store.with_clock(clock.clone())),
        clock,
        backend: "sqlite",
        _guard: Some(Box::new(dir)),
    })
}

pub async fn sqlite_store(path: &std::path::Path) -> idem_runtime::store::sqlite::SqliteStore {
    let store = idem_runtime::store::sqlite::SqliteStore::open(path)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    store
}

pub async fn postgres(start: Timestamp) -> Option<Fixture> {
    let store = postgres_store().await?;
    let clock = Arc::new(ManualClock::new(start));
    Some(Fixture {
        store: Arc::new(store.with_clock(clock.clone())),
        clock,
        backend: "postgres",
        _guard: None,
    })
}

pub async fn postgres_store() -> Option<idem_runtime::store::postgres::PostgresStore> {
    let url = server_url("IDEM_TEST_POSTGRES_URL")?;
    let store = idem_runtime::store::postgres::PostgresStore::connect(&url)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    Some(store)
}

pub async fn mysql(start: Timestamp) -> Option<Fixture> {
    mysql_fixture(start, mysql_store().await?, None)
}

/// [`mysql`] claiming in one statement (`MySqlStore::with_one_round_trip_replays`).
pub async fn mysql_returning(start: Timestamp) -> Option<Fixture> {
    let store = mysql_store().await?.with_one_round_trip_replays();
    mysql_fixture(start, store, None)
}

fn mysql_fixture(
    start: Timestamp,
    store: idem_runtime::store::mysql::MySqlStore,
    guard: Option<Box<dyn std::any::Any + Send + Sync>>,
) -> Option<Fixture> {
    let clock = Arc::new(ManualClock::new(start));
    Some(Fixture {
        store: Arc::new(store.with_clock(clock.clone())),
        clock,
        backend: "mysql",
        _guard: guard,
    })
}

pub async fn mysql_store() -> Option<idem_runtime::store::mysql::MySqlStore> {
    let url = server_url("IDEM_TEST_MYSQL_URL")?;
    let store = idem_runtime::store::mysql::MySqlStore::connect(&url)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    Some(store)
}

/// A database of its own on the server of `url` (PostgreSQL or MariaDB), for a test whose
/// assertions would see other tests' rows (purge counts) or that locks the whole table: its
/// URL, and a guard that drops it.
pub async fn private_database(url: &str, label: &str) -> (String, DropDatabase) {
    use sqlx::Executor;
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "idem_{label}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let (base, _) = url.rsplit_once('/').unwrap();
    if url.starts_with("postgres") {
        let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(url)
            .await
            .unwrap();
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .await
            .unwrap();
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
    } else {
        let mut admin = <sqlx::MySqlConnection as sqlx::Connection>::connect(url)
            .await
            .unwrap();
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name}"
            )))
            .await
            .unwrap();
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
    }
    (
        format!("{base}/{name}"),
        DropDatabase {
            admin_url: url.to_owned(),
            name,
        },
    )
}

/// Drops a [`private_database`] when the test ends (passed or failed).
pub struct DropDatabase {
    admin_url: String,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop runs inside the test's runtime: a thread of its own with a runtime of its own.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    use sqlx::Executor;
                    if url.starts_with("postgres") {
                        if let Ok(mut c) =
                            <sqlx::PgConnection as sqlx::Connection>::connect(&url).await
                        {
                            let _ = c
                                .execute(sqlx::AssertSqlSafe(format!(
                                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                                )))
                                .await;
                        }
                    } else if let Ok(mut c) =
                        <sqlx::MySqlConnection as sqlx::Connection>::connect(&url).await
                    {
                        let _ = c
                            .execute(sqlx::AssertSqlSafe(format!(
                                "DROP DATABASE IF EXISTS {name}"
                            )))
                            .await;
                    }
                })
        })
        .join();
    }
}

/// A PostgreSQL store in a database of its own, migrated, with a manual clock at `start`.
pub async fn postgres_private(start: Timestamp) -> Option<Fixture> {
    let url = server_url("IDEM_TEST_POSTGRES_URL")?;
    let (url, guard) = private_database(&url, "pg").await;
    let store = idem_runtime::store::postgres::PostgresStore::connect(&url)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let clock = Arc::new(ManualClock::new(start));
    Some(Fixture {
        store: Arc::new(store.with_clock(clock.clone())),
        clock,
        backend: "postgres",
        _guard: Some(Box::new(guard)),
    })
}

/// The client URLs of the three nodes of the Galera cluster `scripts/test` starts
/// (`IDEM_TEST_GALERA_URLS`, comma-separated).
pub fn galera_urls() -> Option<Vec<String>> {
    Some(
        server_url("IDEM_TEST_GALERA_URLS")?
            .split(',')
            .map(str::to_owned)
            .collect(),
    )
}

/// A store on node `n` (0-based) of the Galera cluster: it finds out it is on one at connect.
pub async fn galera_store(url: &str) -> idem_runtime::store::mysql::MySqlStore {
    let store = idem_runtime::store::mysql::MySqlStore::connect(url)
        .await
        .unwrap();
    assert!(store.is_galera(), "{url}: wsrep_on not detected");
    store
}

/// The store suite on the Galera cluster: a store on its first node, migrated.
pub async fn galera(start: Timestamp) -> Option<Fixture> {
    let urls = galera_urls()?;
    let store = galera_store(&urls[0]).await;
    store.migrate().await.unwrap();
    mysql_fixture(start, store, None)
}

/// [`galera`] in a database of its own (created on the cluster, so on every node).
pub async fn galera_private(start: Timestamp) -> Option<Fixture> {
    let urls = galera_urls()?;
    let (url, guard) = private_database(&urls[0], "gal").await;
    let store = galera_store(&url).await;
    store.migrate().await.unwrap();
    mysql_fixture(start, store, Some(Box::new(guard)))
}

/// A MariaDB store in a database of its own, migrated, with a manual clock at `start`.
pub async fn mysql_private(start: Timestamp) -> Option<Fixture> {
    mysql_private_with(start, |store| store).await
}

/// [`mysql_private`] claiming in one statement (see [`mysql_returning`]).
pub async fn mysql_returning_private(start: Timestamp) -> Option<Fixture> {
    mysql_private_with(
        start,
        idem_runtime::store::mysql::MySqlStore::with_one_round_trip_replays,
    )
    .await
}

async fn mysql_private_with(
    start: Timestamp,
    configure: fn(idem_runtime::store::mysql::MySqlStore) -> idem_runtime::store::mysql::MySqlStore,
) -> Option<Fixture> {
    let url = server_url("IDEM_TEST_MYSQL_URL")?;
    let (url, guard) = private_database(&url, "my").await;
    let store = idem_runtime::store::mysql::MySqlStore::connect(&url)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    mysql_fixture(start, configure(store), Some(Box::new(guard)))
}

/// A Redis store under a key prefix of its own (so that a purge sees this fixture's records
/// only), with a manual clock at `start`.
pub async fn redis(start: Timestamp) -> Option<Fixture> {
    let store = redis_store().await?;
    let clock = Arc::new(ManualClock::new(start));
    Some(Fixture {
        store: Arc::new(store.with_clock(clock.clone())),
        clock,
        backend: "redis",
        _guard: None,
    })
}

/// A Redis store on `IDEM_TEST_REDIS_URL` under a key prefix no other store (nor an earlier run
/// against the same server) uses, checked by `migrate()`.
pub async fn redis_store() -> Option<idem_runtime::store::redis::RedisStore> {
    let url = server_url("IDEM_TEST_REDIS_URL")?;
    let prefix = redis_prefix();
    let store = idem_runtime::store::redis::RedisStore::connect(&url)
        .await
        .unwrap()
        .with_prefix(&prefix);
    store.migrate().await.unwrap();
    Some(store)
}

/// A store on the Redis Cluster at `IDEM_TEST_REDIS_CLUSTER_URL` (any node), as production
/// should run it: a claim or completion counts once the slot's replica holds it too.
pub async fn redis_cluster(start: Timestamp) -> Option<Fixture> {
    let store = redis_cluster_store()
        .await?
        .with_replica_acks(1, Duration::from_secs(2));
    let clock = Arc::new(ManualClock::new(start));
    Some(Fixture {
        store: Arc::new(store.with_clock(clock.clone())),
        clock,
        backend: "redis-cluster",
        _guard: None,
    })
}

/// A store on the Redis Cluster at `IDEM_TEST_REDIS_CLUSTER_URL` under a key prefix of its own,
/// checked by `migrate()`, without replica acknowledgements.
pub async fn redis_cluster_store() -> Option<idem_runtime::store::redis::RedisStore> {
    let url = server_url("IDEM_TEST_REDIS_CLUSTER_URL")?;
    let store = idem_runtime::store::redis::RedisStore::connect(&url)
        .await
        .unwrap()
        .with_prefix(&redis_prefix());
    assert!(store.is_cluster(), "{url} is not a cluster node");
    store.migrate().await.unwrap();
    Some(store)
}

/// A Redis key prefix no other store (nor an earlier run against the same server) uses.
pub fn redis_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "idem-test:{}-{nanos}-{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
