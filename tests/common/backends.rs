//! The backends the integration tests run over: [`Backend`] opens a fresh store
//! ([`Backend::open`]) or a database of its own ([`Backend::database`]), and
//! [`backend_tests!`](crate::backends::backend_tests) makes one test per scenario and backend.
//!
//! The rule not to break: a server's backend is skipped only through [`server_url`], so that an
//! unset variable is a skip with a note, and a failure under `CI=true`; a server that is
//! configured but does not answer fails the test (`unwrap`), never skips it.

use std::sync::Arc;

use idem::MemoryStore;
use idem::store::{Clock, ManualClock, Store};
use idem::{MySqlStore, PostgresStore, RedisStore, SqliteStore};

use crate::records::Records;
use crate::servers::{server_url, unique};
use crate::sql_pool::SqlPool;

/// One store the tests run over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// A file in a temporary directory.
    Sqlite,
    Postgres,
    /// MariaDB or MySQL.
    Mysql,
    Redis,
}

impl Backend {
    /// Every backend, the embedded ones first.
    pub const ALL: [Backend; 5] = [
        Backend::Memory,
        Backend::Sqlite,
        Backend::Postgres,
        Backend::Mysql,
        Backend::Redis,
    ];

    /// Its name in test names and messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
            Backend::Redis => "redis",
        }
    }

    /// The variable `IDEM_TEST_<SERVER>_<what>` of its server (`URL`, `STOP`, `START`), or
    /// `None` for the embedded backends.
    pub fn var(self, what: &str) -> Option<String> {
        let server = match self {
            Backend::Memory | Backend::Sqlite => return None,
            Backend::Postgres => "POSTGRES",
            Backend::Mysql => "MYSQL",
            Backend::Redis => "REDIS",
        };
        Some(format!("IDEM_TEST_{server}_{what}"))
    }

    /// The URL of its server, or `None` (with a note; a failure under `CI=true`) when it is not
    /// configured. Panics for the embedded backends, which have no server.
    pub fn url(self) -> Option<String> {
        let var = self
            .var("URL")
            .unwrap_or_else(|| panic!("{} has no server", self.name()));
        server_url(&var)
    }

    /// Whether its tests run here: always for the embedded backends, when the server's URL is
    /// set for the others ([`server_url`]'s rule).
    pub fn configured(self) -> bool {
        match self {
            Backend::Memory | Backend::Sqlite => true,
            _ => self.url().is_some(),
        }
    }

    /// A fresh store on the system clock, migrated ([`Backend::open_with_clock`]).
    pub async fn open(self) -> Option<Fixture> {
        self.open_clocked(None).await
    }

    /// A fresh store reading `clock`, migrated: memory and SQLite empty, PostgreSQL and MariaDB
    /// the shared table of their server (every test uses keys of its own), Redis under a key
    /// prefix of its own. `None` when the backend's server is not configured.
    pub async fn open_with_clock(self, clock: Arc<ManualClock>) -> Option<Fixture> {
        self.open_clocked(Some(clock)).await
    }

    async fn open_clocked(self, clock: Option<Arc<ManualClock>>) -> Option<Fixture> {
        let dyn_clock = clock.clone().map(|c| c as Arc<dyn Clock>);
        let mut dir = None;
        let handle = match self {
            Backend::Memory => Handle::Memory(Arc::new(match dyn_clock {
                Some(clock) => MemoryStore::with_clock(clock),
                None => MemoryStore::new(),
            })),
            Backend::Sqlite => {
                let temp = tempfile::tempdir().unwrap();
                let store = SqliteStore::open(temp.path().join("idem.db"))
                    .await
                    .unwrap();
                dir = Some(temp);
                Handle::Sqlite(clocked(store, dyn_clock, SqliteStore::with_clock))
            }
            Backend::Postgres => {
                let store = PostgresStore::connect(&self.url()?).await.unwrap();
                Handle::Postgres(clocked(store, dyn_clock, PostgresStore::with_clock))
            }
            Backend::Mysql => {
                let store = MySqlStore::connect(&self.url()?).await.unwrap();
                Handle::Mysql(clocked(store, dyn_clock, MySqlStore::with_clock))
            }
            Backend::Redis => {
                let prefix = format!("{}:", unique("redis"));
                let store = RedisStore::connect(&self.url()?)
                    .await
                    .unwrap()
                    .with_prefix(&prefix);
                Handle::Redis(clocked(store, dyn_clock, RedisStore::with_clock), prefix)
            }
        };
        let store = handle.store();
        store.migrate().await.unwrap();
        Some(Fixture {
            backend: self,
            store,
            handle,
            clock,
            _dir: dir,
        })
    }

    /// Whether it has SQL databases ([`Backend::database`]): SQLite, PostgreSQL, MariaDB.
    pub fn has_database(self) -> bool {
        matches!(self, Backend::Sqlite | Backend::Postgres | Backend::Mysql)
    }

    /// A database of its own, empty, for a process that opens it by URL (the example, the
    /// CLI): a SQLite file in a temporary directory, or a database created on the server.
    /// `None` when the backend's server is not configured. Panics for memory and Redis.
    pub async fn database(self) -> Option<Database> {
        let name = unique("db");
        let (url, dir) = match self {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("idem.db").display());
                (url, Some(dir))
            }
            Backend::Postgres | Backend::Mysql => {
                let base = self.url()?;
                let admin = SqlPool::connect(&base).await;
                admin.execute(format!("CREATE DATABASE {name}")).await;
                admin.close().await;
                (with_database(&base, &name), None)
            }
            Backend::Memory | Backend::Redis => panic!("{} has no database", self.name()),
        };
        Some(Database {
            backend: self,
            url,
            nodes: Vec::new(),
            _dir: dir,
        })
    }

    /// The table of idem's records in its SQL databases. Panics for memory and Redis.
    pub fn records_table(self) -> &'static str {
        match self {
            Backend::Sqlite | Backend::Mysql => "idem_idempotency_records",
            Backend::Postgres => "idem.idempotency_records",
            Backend::Memory | Backend::Redis => panic!("{} has no table", self.name()),
        }
    }
}

/// Runs `test` on a fresh store of `backend` on the system clock ([`Backend::open`]), or
/// nothing when the backend's server is not configured: a runner of [`backend_tests!`].
pub async fn on_store(backend: Backend, test: impl AsyncFnOnce(&Fixture)) {
    if let Some(fixture) = backend.open().await {
        test(&fixture).await;
    }
}

/// [`on_store`] with a store that reads a manual clock starting now ([`Fixture::clock`]).
pub async fn on_clocked_store(backend: Backend, test: impl AsyncFnOnce(&Fixture)) {
    let clock = Arc::new(ManualClock::starting_now());
    if let Some(fixture) = backend.open_with_clock(clock).await {
        test(&fixture).await;
    }
}

/// Runs `test` on a database of its own of `backend` ([`Backend::database`]), or nothing when
/// the backend's server is not configured: a runner of [`backend_tests!`].
pub async fn on_database(backend: Backend, test: impl AsyncFnOnce(&Database)) {
    if let Some(db) = backend.database().await {
        test(&db).await;
    }
}

/// The backends whose tests run here ([`Backend::configured`]).
pub fn backends() -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| b.configured())
        .collect()
}

fn clocked<S>(store: S, clock: Option<Arc<dyn Clock>>, with: fn(S, Arc<dyn Clock>) -> S) -> S {
    match clock {
        Some(clock) => with(store, clock),
        None => store,
    }
}

/// `base` (a server URL with a database path) with `database` instead.
pub fn with_database(base: &str, database: &str) -> String {
    let (server, rest) = base.rsplit_once('/').expect("a URL with a database path");
    let params = rest.split_once('?').map(|(_, p)| format!("?{p}"));
    format!("{server}/{database}{}", params.unwrap_or_default())
}

/// The store of one backend, as its own type.
enum Handle {
    Memory(Arc<MemoryStore>),
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
    Mysql(MySqlStore),
    /// The store and its key prefix.
    Redis(RedisStore, String),
}

impl Handle {
    fn store(&self) -> Arc<dyn Store> {
        match self {
            Handle::Memory(s) => s.clone(),
            Handle::Sqlite(s) => Arc::new(s.clone()),
            Handle::Postgres(s) => Arc::new(s.clone()),
            Handle::Mysql(s) => Arc::new(s.clone()),
            Handle::Redis(s, _) => Arc::new(s.clone()),
        }
    }
}

/// A fresh store of one backend ([`Backend::open`]), and whatever must live as long as it.
pub struct Fixture {
    pub backend: Backend,
    pub store: Arc<dyn Store>,
    handle: Handle,
    clock: Option<Arc<ManualClock>>,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// The clock the store reads. Panics for a store on the system clock.
    pub fn clock(&self) -> &Arc<ManualClock> {
        self.clock
            .as_ref()
            .expect("a store opened with Backend::open_with_clock")
    }

    /// Its records, read beside the store.
    pub fn records(&self) -> Records {
        match &self.handle {
            Handle::Memory(s) => Records::Memory(s.clone()),
            Handle::Sqlite(s) => Records::Sqlite(s.pool().clone()),
            Handle::Postgres(s) => Records::Postgres(s.pool().clone()),
            Handle::Mysql(s) => Records::MySql(s.pool().clone()),
            Handle::Redis(s, prefix) => Records::Redis {
                conn: s.connection().clone(),
                records: format!("{prefix}rec:"),
            },
        }
    }

    /// The pool of a SQL store, for tables beside its records. Panics for memory and Redis.
    pub fn sql_pool(&self) -> SqlPool {
        match &self.handle {
            Handle::Sqlite(s) => SqlPool::Sqlite(s.pool().clone()),
            Handle::Postgres(s) => SqlPool::Postgres(s.pool().clone()),
            Handle::Mysql(s) => SqlPool::MySql(s.pool().clone()),
            Handle::Memory(_) | Handle::Redis(..) => {
                panic!("{} has no SQL pool", self.backend.name())
            }
        }
    }

    /// How many statements (Redis: commands) the store has sent so far; `None` for memory.
    pub fn statements(&self) -> Option<u64> {
        match &self.handle {
            Handle::Memory(_) => None,
            Handle::Sqlite(s) => Some(s.statement_count()),
            Handle::Postgres(s) => Some(s.statement_count()),
            Handle::Mysql(s) => Some(s.statement_count()),
            Handle::Redis(s, _) => Some(s.command_count()),
        }
    }
}

/// A database of its own ([`Backend::database`]).
pub struct Database {
    pub backend: Backend,
    /// Its URL, for `DATABASE_URL`.
    pub url: String,
    /// On a multi-primary cluster, its URL on each node (`url` is the first); empty otherwise.
    pub nodes: Vec<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    /// A database at `url` on a server the test started itself (a primary with a standby,
    /// say), nothing to clean up.
    pub fn at(backend: Backend, url: String) -> Database {
        Database {
            backend,
            url,
            nodes: Vec::new(),
            _dir: None,
        }
    }

    /// A fresh database on the MariaDB Galera cluster of `IDEM_TEST_GALERA_URLS` (one URL per
    /// node), created through its first node and so on every node.
    pub async fn on_galera() -> Option<Database> {
        let urls: Vec<String> = server_url("IDEM_TEST_GALERA_URLS")?
            .split(',')
            .map(str::to_owned)
            .collect();
        let name = unique("db");
        let admin = SqlPool::connect(&urls[0]).await;
        admin.execute(format!("CREATE DATABASE {name}")).await;
        admin.close().await;
        let nodes: Vec<String> = urls.iter().map(|u| with_database(u, &name)).collect();
        Some(Database {
            backend: Backend::Mysql,
            url: nodes[0].clone(),
            nodes,
            _dir: None,
        })
    }

    /// A store on the database reading `clock`, not migrated.
    pub async fn store_with_clock(&self, clock: Arc<dyn Clock>) -> Arc<dyn Store> {
        match self.backend {
            Backend::Sqlite => {
                let path = self.url.trim_start_matches("sqlite://");
                Arc::new(SqliteStore::open(path).await.unwrap().with_clock(clock))
            }
            Backend::Postgres => Arc::new(
                PostgresStore::connect(&self.url)
                    .await
                    .unwrap()
                    .with_clock(clock),
            ),
            Backend::Mysql => Arc::new(
                MySqlStore::connect(&self.url)
                    .await
                    .unwrap()
                    .with_clock(clock),
            ),
            Backend::Memory | Backend::Redis => unreachable!("no database"),
        }
    }

    /// A store on the database, not migrated.
    pub async fn store(&self) -> Arc<dyn Store> {
        match self.backend {
            Backend::Sqlite => {
                let path = self.url.trim_start_matches("sqlite://");
                Arc::new(SqliteStore::open(path).await.unwrap())
            }
            Backend::Postgres => Arc::new(PostgresStore::connect(&self.url).await.unwrap()),
            Backend::Mysql => Arc::new(MySqlStore::connect(&self.url).await.unwrap()),
            Backend::Memory | Backend::Redis => unreachable!("no database"),
        }
    }

    /// A pool of its own on the database (close it when done).
    pub async fn pool(&self) -> SqlPool {
        SqlPool::connect(&self.url).await
    }
}

/// One test per scenario and backend, `<scenario>::<backend>`, each a tokio test with
/// `$threads` worker threads that calls `$run(backend, scenario)` (`$run` and the scenarios are
/// functions of the calling module):
///
/// ```text
/// backend_tests!(4, with_fixture, [memory, sqlite, postgres], first_claim, replay);
/// ```
macro_rules! backend_tests {
    (@variant memory) => { $crate::backends::Backend::Memory };
    (@variant sqlite) => { $crate::backends::Backend::Sqlite };
    (@variant postgres) => { $crate::backends::Backend::Postgres };
    (@variant mysql) => { $crate::backends::Backend::Mysql };
    (@variant redis) => { $crate::backends::Backend::Redis };
    (@scenario $threads:literal, $run:ident, [$($backend:ident),+], $test:ident) => {
        mod $test {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $backend() {
                    super::$run(
                        $crate::backends::backend_tests!(@variant $backend),
                        super::$test,
                    )
                    .await;
                }
            )+
        }
    };
    ($threads:literal, $run:ident, $backends:tt, $($test:ident),+ $(,)?) => {
        $( $crate::backends::backend_tests!(@scenario $threads, $run, $backends, $test); )+
    };
}
pub(crate) use backend_tests;
