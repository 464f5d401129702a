//! [`RedisStore`]: the claim engine on Redis or Valkey, for services whose fast shared state is
//! there already.
//!
//! Every operation is one `EVALSHA` of a Lua script; a record is the hash
//! `<prefix>rec:<key hash>`. On one server the sorted set `<prefix>expire_at` indexes the
//! expiries the purge walks; on a Redis Cluster there is no index (every script then touches
//! one key, so one slot), and Redis's own key expiry, which follows every write of a record,
//! deletes expired records on every shard at once.
//!
//! `lua` holds the scripts (their text in `scripts/*.lua`), `connection` the connection and the
//! calls over it, `decode` the reading of the scripts' replies, `store` the
//! [`Store`](crate::store::Store) operations.
//!
//! The rule: a record is read, decided on and written inside one script, by the server's
//! `TIME` (or the test clock passed as an argument), never across two commands. The
//! guarantees need `appendonly yes`, `appendfsync always` and `maxmemory-policy noeviction`;
//! surviving a failover needs the replicas' acknowledgement
//! ([`RedisStore::with_replica_acks`]).
//!
//! Layout, scripts, expiry and durability: `docs/storage.md`, "Redis / Valkey" and
//! "Replicated and sharded stores".

mod connection;
mod decode;
mod lua;
mod store;

use core::fmt;
use core::time::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

pub use self::connection::RedisConnection;
use self::connection::{Connection, classify, is_transient};
use super::clock::{Clock, duration_millis};
use super::error::StoreError;
use crate::key::ScopedKey;

/// The scripts of this store that other code calls by hand.
///
/// The claim path's are for the benchmark's hand-written baseline, not a public API. The
/// operator scripts are what the `idem` CLI's `rekey` calls, usable by other tools beside the
/// store: reading a live stored record ([`READ_STORED`](scripts::READ_STORED)) and rewriting its
/// response under its row version ([`REWRITE_STORED`](scripts::REWRITE_STORED)).
#[doc(hidden)]
pub mod scripts {
    /// The claim script: `KEYS` record, index, index of remembered responses; `ARGV` readable
    /// key, request hash, operation id, now (`''`: the server's), lease ms, TTL ms, expiry
    /// margin ms, key hash in hex, remember ms (0: none).
    pub const CLAIM: &str = super::lua::CLAIM_LUA;
    /// The completion script: `KEYS` record, index, index of remembered responses; `ARGV` fence, operation id, state, status,
    /// headers blob, body, `'1'` with a business number, the business number, expire_at (`''`),
    /// now (`''`), expiry margin ms, key hash in hex.
    pub const COMPLETE: &str = super::lua::COMPLETE_LUA;
    /// A live stored record's fields, or nothing: `KEYS` the record (`<prefix>rec:<key hash>`).
    /// Answers `rev`, `idem_key`, `resp_headers`, `resp_body`, `biz_no` (absent: empty),
    /// `operation_id`, `request_hash`, `resp_status`, `state` for a completed or failed-stored
    /// record not expired by the server's clock, `{}` otherwise.
    pub const READ_STORED: &str = super::lua::READ_STORED_LUA;
    /// The response of a stored record replaced while it is still operation `ARGV[5]` at `rev`
    /// `ARGV[1]`: `KEYS` the record; `ARGV` rev, idem_key, headers blob, body, operation id,
    /// business number (empty: none). Answers 1, or 0 when the store wrote the record since.
    pub const REWRITE_STORED: &str = super::lua::REWRITE_STORED_LUA;
}

/// The default key prefix.
const DEFAULT_PREFIX: &str = "idem:";

/// The default time Redis keeps a record past its `expire_at` before deleting it by itself.
const DEFAULT_EXPIRY_MARGIN: Duration = Duration::from_secs(300);

/// How many replicas must hold a write before the store reports it done
/// ([`RedisStore::with_replica_acks`]).
#[derive(Clone, Copy, Debug)]
struct ReplicaAcks {
    replicas: u32,
    timeout: Duration,
}

/// Fewer replicas acknowledged a write in time than [`RedisStore::with_replica_acks`] asks
/// for: the write is on the primary, and a failover now could lose it. Reported as
/// [`StoreError::Unavailable`].
#[derive(Debug, thiserror::Error)]
#[error(
    "{acked} of the {wanted} replicas required acknowledged the {what} within {timeout:?}: a failover now could lose it, so it is not reported done; check the replicas' links (`INFO replication`)"
)]
pub struct ReplicasBehind {
    /// The write: `claim`, `completion` or `lease extension`.
    pub what: &'static str,
    /// The replicas that acknowledged it.
    pub acked: u32,
    /// The replicas required.
    pub wanted: u32,
    /// How long the store waited.
    pub timeout: Duration,
}

/// A [`Store`](crate::store::Store) on Redis or Valkey, one server or a Redis Cluster: one hash
/// per record, every operation one atomic Lua script (`docs/storage.md`, "Redis / Valkey", for
/// the layout, the scripts and the durability the guarantees need).
///
/// Every decision about time is taken by the Redis server's clock (`TIME`), never the
/// application's.
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::store::StoreError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use idem_runtime::store::redis::RedisStore;
/// use idem_runtime::store::{Store, Sweeper};
/// // A server, or any node of a cluster (the store asks it which it is).
/// let store = RedisStore::connect("redis://127.0.0.1:6379/0")
///     .await?
///     // A claim and a completion count once one replica holds them too.
///     .with_replica_acks(1, Duration::from_millis(500));
/// store.migrate().await?; // checks `maxmemory-policy`, loads the scripts
/// let sweeper = Sweeper::new(Arc::new(store.clone())).spawn();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    conn: RedisConnection,
    /// `<prefix>rec:`, the prefix of the records' keys.
    records: Arc<str>,
    /// `<prefix>expire_at`, the sorted set of expiries; none on a cluster.
    index: Option<Arc<str>>,
    /// `<prefix>replay_until`, the sorted set of the remembered records whose response the
    /// purge frees at their TTL (`remember`); none on a cluster.
    responses: Option<Arc<str>>,
    clock: Option<Arc<dyn Clock>>,
    margin: Duration,
    acks: Option<ReplicaAcks>,
    commands: Arc<AtomicU64>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("conn", &self.conn)
            .field("records", &self.records)
            .field("index", &self.index)
            .field("clock_override", &self.clock.is_some())
            .field("expiry_margin", &self.margin)
            .field("replica_acks", &self.acks)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The connection options [`connect`](Self::connect) uses: connecting gives up after 2 s,
    /// a command after 5 s, and a lost connection is re-established in the background with one
    /// retry per attempt, so that requests meanwhile fail fast with
    /// [`StoreError::Unavailable`] instead of queueing behind the reconnection.
    pub fn connection_options() -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
    }

    /// The cluster client [`connect`](Self::connect) builds for a Redis Cluster, from its seed
    /// nodes: the same timeouts as [`connection_options`](Self::connection_options), and three
    /// retries 50 to 500 ms apart for a redirection, a `TRYAGAIN` or a node being failed over,
    /// so that a request during a failover gets [`StoreError::Unavailable`] within seconds
    /// rather than waiting for the default's minutes of retries.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a malformed URL.
    pub fn cluster_client(nodes: &[&str]) -> Result<ClusterClient, StoreError> {
        ClusterClient::builder(nodes.iter().copied())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(5))
            .retries(3)
            .min_retry_wait(50)
            .max_retry_wait(500)
            .build()
            .map_err(|e| StoreError::Config {
                message: "invalid Redis Cluster node URL".to_owned(),
                source: Some(Box::new(e)),
            })
    }

    /// Connects to `url` (`redis://[user:password@]host[:port][/db]`): a server, with
    /// [`connection_options`](Self::connection_options), or, when the server says it is a node
    /// of a Redis Cluster (`cluster_enabled:1`), the whole cluster through
    /// [`cluster_client`](Self::cluster_client). Several URLs separated by commas are seed
    /// nodes of a cluster.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a malformed URL; [`StoreError::Unavailable`] when the server
    /// cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let nodes: Vec<&str> = url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        if nodes.len() > 1 {
            return Self::connect_cluster(Self::cluster_client(&nodes)?).await;
        }
        let client = redis::Client::open(url).map_err(|e| StoreError::Config {
            message: "invalid Redis URL".to_owned(),
            source: Some(Box::new(e)),
        })?;
        let store = Self::connect_with(client, Self::connection_options()).await?;
        let mut conn = store.conn.clone();
        // A user whose ACL forbids `INFO` cannot be on a cluster it cannot discover either.
        let info: String = match redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut conn)
            .await
        {
            Ok(info) => info,
            Err(e) if is_transient(&e) => return Err(classify(e)),
            Err(_) => String::new(),
        };
        if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            return Self::connect_cluster(Self::cluster_client(&[url])?).await;
        }
        Ok(store)
    }

    /// Connects with the `redis` crate's client (TLS, a Unix socket, credentials, ...) and
    /// connection manager options, to one server.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn connect_with(
        client: redis::Client,
        options: ConnectionManagerConfig,
    ) -> Result<Self, StoreError> {
        let conn = ConnectionManager::new_with_config(client, options)
            .await
            .map_err(classify)?;
        Ok(Self::from_connection(conn))
    }

    /// Connects to a Redis Cluster with the `redis` crate's cluster client (see
    /// [`cluster_client`](Self::cluster_client) for the one [`connect`](Self::connect) builds).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when no node can be reached.
    pub async fn connect_cluster(client: ClusterClient) -> Result<Self, StoreError> {
        let conn = client.get_async_connection().await.map_err(classify)?;
        Ok(Self::from_cluster(conn))
    }

    /// A store over an existing connection manager (shared with the application's own use of
    /// Redis: it multiplexes every command over one connection).
    pub fn from_connection(conn: ConnectionManager) -> Self {
        Self::new(Connection::Server(conn))
    }

    /// A store over an existing cluster connection (shared with the application's own use of
    /// the cluster).
    pub fn from_cluster(conn: ClusterConnection) -> Self {
        Self::new(Connection::Cluster(conn))
    }

    fn new(conn: Connection) -> Self {
        let conn = RedisConnection(conn);
        RedisStore {
            records: Arc::from(format!("{DEFAULT_PREFIX}rec:")),
            index: (!conn.is_cluster()).then(|| Arc::from(format!("{DEFAULT_PREFIX}expire_at"))),
            responses: (!conn.is_cluster())
                .then(|| Arc::from(format!("{DEFAULT_PREFIX}replay_until"))),
            conn,
            clock: None,
            margin: DEFAULT_EXPIRY_MARGIN,
            acks: None,
            commands: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Keeps the records under `prefix` (`idem:` by default): several services, or several
    /// stores with their own records, on one server or cluster. On a cluster, a prefix with a
    /// hash tag (`{..}`) puts every record in one slot, so on one shard:
    /// [`Store::migrate`](crate::store::Store::migrate) warns about it.
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.records = Arc::from(format!("{prefix}rec:"));
        if self.index.is_some() {
            self.index = Some(Arc::from(format!("{prefix}expire_at")));
            self.responses = Some(Arc::from(format!("{prefix}replay_until")));
        }
        self
    }

    /// The beginning of every record's key, `<prefix>rec:` (a record is
    /// `<prefix>rec:<key hash in hex>`): what a tool that scans the records matches.
    pub fn records_prefix(&self) -> &str {
        &self.records
    }

    /// How long Redis keeps a record past its `expire_at` before deleting it by itself (5
    /// minutes by default). On one server, longer than the sweeper's interval, so that the
    /// sweeper normally deletes it first; on a cluster, Redis's expiry is the purge, and the
    /// margin is how long an expired record stays for inspection.
    pub fn with_expiry_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// Reports a claim, a completion or a lease extension done only once `replicas` replicas
    /// hold it too (`WAIT replicas timeout` on the same connection, right after the script):
    /// a failover to one of them then keeps it. Without it (the default), Redis replicates
    /// asynchronously, and a failover can lose an acknowledged claim: the retry then claims the
    /// key afresh under a new operation id and runs the operation a second time
    /// (`docs/storage.md`, "Replicated and sharded stores", has the measured figures).
    ///
    /// When fewer replicas acknowledge within `timeout`, the call fails with
    /// [`StoreError::Unavailable`] (its source a [`ReplicasBehind`]): a claim is given back
    /// (its lease ended, so that the retry takes it over at once under the same operation id)
    /// and the handler does not run, the client gets `503` + `Retry-After`; a completion is
    /// retried by the engine while the lease is held. Keep `timeout` well under the engine's
    /// store timeout.
    pub fn with_replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.acks = (replicas > 0).then_some(ReplicaAcks { replicas, timeout });
        self
    }

    /// Decides by `clock` instead of the Redis server's clock: **for tests** (a
    /// [`ManualClock`](crate::store::ManualClock) moves time without sleeping). Every script
    /// then gets `clock`'s time where it would read the server's `TIME`. In production leave it
    /// unset: several application instances would otherwise need synchronized clocks.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The connection: a server's, or a cluster's.
    pub fn connection(&self) -> &RedisConnection {
        &self.conn
    }

    /// `true` on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Commands (script calls) sent so far by this store and its clones; diagnostics.
    pub fn command_count(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    fn record_key(&self, key: &ScopedKey) -> String {
        format!("{}{}", self.records, key.hash_hex())
    }

    /// The override's time as a script argument, or `''`: the server's `TIME`.
    fn now_arg(&self) -> String {
        self.clock
            .as_ref()
            .map(|c| c.now().as_millis().to_string())
            .unwrap_or_default()
    }

    fn margin_ms(&self) -> i64 {
        duration_millis(self.margin)
    }
}
