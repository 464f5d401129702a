//! [`RedisStore`]: the claim engine on Redis or Valkey, for services whose fast shared state is
//! there already.
//!
//! Every operation is one `EVALSHA` of a Lua script; a record is the hash
//! `<prefix>rec:<key hash>`. On one server the sorted set `<prefix>expire_at` indexes the
//! expiries the purge walks; on a Redis Cluster there is no index (every script then touches
//! one key, so one slot), and Redis's own key expiry, which follows every write of a record,
//! deletes expired records on every shard at once.
//!
//! The rule: a record is read, decided on and written inside one script, by the server's
//! `TIME` (or the test clock passed as an argument), never across two commands. The
//! guarantees need `appendonly yes`, `appendfsync always` and `maxmemory-policy noeviction`;
//! surviving a failover needs the replicas' acknowledgement
//! ([`RedisStore::with_replica_acks`]).
//!
//! Layout, scripts, expiry and durability: `docs/storage.md`, "Redis / Valkey" and
//! "Replicated and sharded stores".

use core::fmt;
use core::time::Duration;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Script, ServerErrorKind, Value};

use super::clock::{Clock, SystemClock, Timestamp, duration_millis};
use super::error::StoreError;
use super::headers::{decode_headers, encode_headers};
use super::interface::{
    BoxFuture, Claim, ClaimRequest, Completion, Lease, Record, RecordState, Store, new_operation_id,
};
use crate::key::ScopedKey;

/// Lua shared by the scripts: the clock, integers as decimal strings, the record's fields.
macro_rules! lua_prelude {
    () => {
        r#"
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function int(n) return string.format('%d', n) end
local function keep(key, expire_at, now, margin)
  redis.call('PEXPIRE', key, int(math.max(expire_at - now, 0) + margin))
end
local function record(key)
  return redis.call('HMGET', key, 'idem_key', 'request_hash', 'state', 'operation_id', 'fence',
    'resp_status', 'resp_headers', 'resp_body', 'biz_no', 'locked_at', 'lease_until', 'expire_at',
    'created_at', 'updated_at', 'completed_at')
end
"#
    };
}

/// The claim (S13, S21, S23). `KEYS`: record, index (none on a cluster). `ARGV`: readable key, request hash, a new
/// operation id, now (`''`: the server's), lease ms, TTL ms, expiry margin ms, key hash (the
/// index member). Answers `{1, fence, operation id, lease_until, expire_at, took_over, now}`
/// (acquired), `{2, holder's request hash, retry after ms}` (in progress), `{3, now, record..}`
/// (completed) or `{0, detail}` (a record that does not decode).
const CLAIM_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local now = clock(ARGV[4])
local lease, ttl, margin = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local lease_until = now + lease
local r = redis.call('HMGET', KEYS[1], 'state', 'fence', 'operation_id', 'request_hash',
  'lease_until', 'expire_at', 'created_at')
local fence, op, created, expire_at, took = 1, ARGV[3], now, now + math.max(lease, ttl), 0
if r[1] or r[2] or r[3] or r[6] then
  local f, lu, ea, ca = tonumber(r[2]), tonumber(r[5]), tonumber(r[6]), tonumber(r[7])
  if not (r[1] and f and lu and ea and ca and r[3] and r[4]) then
    return {0, 'missing or malformed field'}
  end
  if ea > now then
    if r[1] ~= '0' then
      local rec = record(KEYS[1])
      return {3, now, unpack(rec)}
    end
    if lu > now or r[4] ~= ARGV[2] then
      return {2, r[4], math.max(lu - now, 0)}
    end
    -- An ended lease of the same request: take over, same operation (S23).
    op, created, expire_at, took = r[3], ca, math.max(ea, lease_until), 1
  end
  -- Expired: logically absent, a new operation replaces it (S21); the fence still grows.
  fence = f + 1
  redis.call('HDEL', KEYS[1], 'resp_status', 'resp_headers', 'resp_body', 'biz_no', 'completed_at')
end
redis.call('HSET', KEYS[1], 'idem_key', ARGV[1], 'request_hash', ARGV[2], 'state', '0',
  'operation_id', op, 'fence', int(fence), 'locked_at', int(now), 'lease_until', int(lease_until),
  'expire_at', int(expire_at), 'created_at', int(created), 'updated_at', int(now))
redis.call('HINCRBY', KEYS[1], 'rev', 1)
keep(KEYS[1], expire_at, now, margin)
if KEYS[2] then redis.call('ZADD', KEYS[2], int(expire_at), ARGV[8]) end
return {1, fence, op, lease_until, expire_at, took, now}
"#
);

/// `owned`: the record is processing under the lease's fence (`ARGV[1]`) and operation id
/// (`ARGV[2]`).
macro_rules! lua_owned {
    () => {
        r#"
local r = redis.call('HMGET', KEYS[1], 'state', 'fence', 'operation_id', 'expire_at', 'lease_until')
local ours = r[1] ~= false and r[2] == ARGV[1] and r[3] == ARGV[2]
local owned = ours and r[1] == '0'
"#
    };
}

/// Completion (S18). `KEYS`: record, index (none on a cluster). `ARGV`: fence, operation id,
/// state, status, headers, body, `'1'` with a business number, the business number, expire_at
/// (`''`: keep), now, margin, key hash. Answers 2 (stored), 1 (stored earlier under this very
/// lease: a retry after a lost acknowledgement, or after replicas that did not acknowledge in
/// time) or 0 (fenced out).
///
/// The retry rewrites the record's state with its own value: a write of this connection, so
/// that the `WAIT` after it counts the replicas that hold the completion stored earlier.
const COMPLETE_LUA: &str = concat!(
    lua_prelude!(),
    lua_owned!(),
    r#"
if not ours then return 0 end
if not owned then
  redis.call('HSET', KEYS[1], 'state', r[1])
  return 1
end
local now = clock(ARGV[10])
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'resp_status', ARGV[4], 'resp_headers', ARGV[5],
  'resp_body', ARGV[6], 'updated_at', int(now), 'completed_at', int(now))
redis.call('HINCRBY', KEYS[1], 'rev', 1)
if ARGV[7] == '1' then
  redis.call('HSET', KEYS[1], 'biz_no', ARGV[8])
else
  redis.call('HDEL', KEYS[1], 'biz_no')
end
if ARGV[9] ~= '' then
  local ea = tonumber(ARGV[9])
  redis.call('HSET', KEYS[1], 'expire_at', ARGV[9])
  if KEYS[2] then redis.call('ZADD', KEYS[2], ARGV[9], ARGV[12]) end
  keep(KEYS[1], ea, now, tonumber(ARGV[11]))
end
return 2
"#
);

/// Release: deletes the processing record the lease owns. `KEYS`: record, index (none on a
/// cluster). `ARGV`:
/// fence, operation id, key hash. Answers 1, or 0 (fenced out).
const RELEASE_LUA: &str = concat!(
    lua_owned!(),
    r#"
if not owned then return 0 end
redis.call('UNLINK', KEYS[1])
if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[3]) end
return 1
"#
);

/// Abandon: ends the lease now, keeps the record. `KEYS`: record. `ARGV`: fence, operation id,
/// now. Answers 1, or 0 (fenced out).
const ABANDON_LUA: &str = concat!(
    lua_prelude!(),
    lua_owned!(),
    r#"
if not owned then return 0 end
local now = clock(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_until', int(math.min(tonumber(r[5]), now)), 'updated_at', int(now))
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return 1
"#
);

/// Extend: the lease ends `by` from now, the record lives at least as long. `KEYS`: record,
/// index (none on a cluster). `ARGV`: fence, operation id, by ms, now, margin, key hash. Answers
/// `{1, lease_until, expire_at}`, or `{0}` (fenced out).
const EXTEND_LUA: &str = concat!(
    lua_prelude!(),
    lua_owned!(),
    r#"
if not owned then return {0} end
local now = clock(ARGV[4])
local lu = now + tonumber(ARGV[3])
local ea = math.max(tonumber(r[4]), lu)
redis.call('HSET', KEYS[1], 'lease_until', int(lu), 'expire_at', int(ea), 'updated_at', int(now))
redis.call('HINCRBY', KEYS[1], 'rev', 1)
if KEYS[2] then redis.call('ZADD', KEYS[2], int(ea), ARGV[6]) end
keep(KEYS[1], ea, now, tonumber(ARGV[5]))
return {1, lu, ea}
"#
);

/// The record and the clock, read together. `KEYS`: record. `ARGV`: now. Answers
/// `{now, record..}`.
const GET_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local now = clock(ARGV[1])
local rec = record(KEYS[1])
return {now, unpack(rec)}
"#
);

/// Purge (S21) along the index, oldest expiry first, ties by key hash (the sorted set's own
/// order): deletes up to `batch` records whose `expire_at` has passed, re-checked on the record
/// itself; drops the entries of records Redis already deleted without counting them, looking at
/// no more than ten batches' worth of entries in one call. `KEYS`: index. `ARGV`: now, batch,
/// record key prefix. Answers the number of records deleted.
const PURGE_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local now, batch = clock(ARGV[1]), tonumber(ARGV[2])
local deleted, seen = 0, 0
while deleted < batch and seen < 10 * batch do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'LIMIT', 0, batch - deleted)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local key = ARGV[3] .. id
    local ea = tonumber(redis.call('HGET', key, 'expire_at'))
    if ea and ea > now then
      redis.call('ZADD', KEYS[1], int(ea), id)
    else
      if ea then
        redis.call('UNLINK', key)
        deleted = deleted + 1
      end
      redis.call('ZREM', KEYS[1], id)
    end
  end
  seen = seen + #ids
end
return deleted
"#
);

/// The scripts of this store, for the benchmark's hand-written baseline. Not a public API.
#[doc(hidden)]
pub mod scripts {
    /// The claim script: `KEYS` record, index; `ARGV` readable key, request hash, operation id,
    /// now (`''`: the server's), lease ms, TTL ms, expiry margin ms, key hash in hex.
    pub const CLAIM: &str = super::CLAIM_LUA;
    /// The completion script: `KEYS` record, index; `ARGV` fence, operation id, state, status,
    /// headers blob, body, `'1'` with a business number, the business number, expire_at (`''`),
    /// now (`''`), expiry margin ms, key hash in hex.
    pub const COMPLETE: &str = super::COMPLETE_LUA;
}

static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM_LUA));
static COMPLETE: LazyLock<Script> = LazyLock::new(|| Script::new(COMPLETE_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(ABANDON_LUA));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
static GET: LazyLock<Script> = LazyLock::new(|| Script::new(GET_LUA));
static PURGE: LazyLock<Script> = LazyLock::new(|| Script::new(PURGE_LUA));

/// The default key prefix.
const DEFAULT_PREFIX: &str = "idem:";

/// The default time Redis keeps a record past its `expire_at` before deleting it by itself.
const DEFAULT_EXPIRY_MARGIN: Duration = Duration::from_secs(300);

/// The store's connection to Redis: one multiplexed connection to a server (that reconnects by
/// itself), or the cluster client's connections to every node of a Redis Cluster (that follow
/// `MOVED`/`ASK` redirections and resharding). Either sends any command of the `redis` crate:
///
/// ```no_run
/// # async fn demo(store: idem_runtime::store::redis::RedisStore) -> redis::RedisResult<()> {
/// let mut conn = store.connection().clone();
/// let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisConnection(Connection);

#[derive(Clone)]
enum Connection {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConnection {
    /// `true` on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.0, Connection::Cluster(_))
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Connection::Server(_) => "RedisConnection::Server",
            Connection::Cluster(_) => "RedisConnection::Cluster",
        })
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.0 {
            Connection::Server(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.0 {
            Connection::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Connection::Server(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

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

/// A [`Store`] on Redis or Valkey, one server or a Redis Cluster: one hash per record, every
/// operation one atomic Lua script (`docs/storage.md`, "Redis / Valkey", for the layout, the
/// scripts and the durability the guarantees need).
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
            conn,
            clock: None,
            margin: DEFAULT_EXPIRY_MARGIN,
            acks: None,
            commands: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Keeps the records under `prefix` (`idem:` by default): several services, or several
    /// stores with their own records, on one server or cluster. On a cluster, a prefix with a
    /// hash tag (`{..}`) puts every record in one slot, so on one shard: [`Store::migrate`]
    /// warns about it.
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.records = Arc::from(format!("{prefix}rec:"));
        if self.index.is_some() {
            self.index = Some(Arc::from(format!("{prefix}expire_at")));
        }
        self
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

    /// `EVALSHA` of `script` on `key`'s record, and on the index too when `indexed` and the
    /// store has one; the caller adds the arguments.
    fn script(&self, script: &Script, key: &ScopedKey, indexed: bool) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash());
        match &self.index {
            Some(index) if indexed => cmd.arg(2).arg(self.record_key(key)).arg(&**index),
            _ => cmd.arg(1).arg(self.record_key(key)),
        };
        cmd
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

    /// Sends one script call, loading the script first when the server does not know it (a
    /// restarted server, a replica promoted since [`Store::migrate`]).
    async fn call(&self, script: &Script, cmd: &Cmd) -> Result<Value, StoreError> {
        self.commands.fetch_add(1, Ordering::Relaxed);
        let mut conn = self.conn.clone();
        match cmd.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                load(script, &mut conn).await?;
                cmd.query_async(&mut conn).await.map_err(classify)
            }
            reply => reply.map_err(classify),
        }
    }

    /// Sends one script call that writes what a failover must keep: with
    /// [`with_replica_acks`](Self::with_replica_acks), pipelined with `WAIT` on the same
    /// connection (on a cluster, to the master of the record's slot), so that the count covers
    /// this very write. Answers the script's reply and, when too few replicas acknowledged it,
    /// by how much.
    async fn call_durable(
        &self,
        script: &Script,
        cmd: &Cmd,
        what: &'static str,
    ) -> Result<(Value, Option<ReplicasBehind>), StoreError> {
        let Some(acks) = self.acks else {
            return Ok((self.call(script, cmd).await?, None));
        };
        self.commands.fetch_add(1, Ordering::Relaxed);
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(acks.replicas)
            .arg(duration_millis(acks.timeout));
        let mut conn = self.conn.clone();
        let (value, acked): (Value, u32) = match pipe.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                load(script, &mut conn).await?;
                pipe.query_async(&mut conn).await.map_err(classify)?
            }
            reply => reply.map_err(classify)?,
        };
        let behind = (acked < acks.replicas).then_some(ReplicasBehind {
            what,
            acked,
            wanted: acks.replicas,
            timeout: acks.timeout,
        });
        Ok((value, behind))
    }

    /// `CONFIG GET name` on the server, or on every node of a cluster: the values seen (`None`
    /// where a node forbids `CONFIG`, as some managed services do, after a warning).
    async fn config(&self, name: &'static str) -> Result<Vec<Option<String>>, StoreError> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        let reply = match &self.conn.0 {
            Connection::Server(c) => cmd.query_async::<Value>(&mut c.clone()).await,
            Connection::Cluster(c) => {
                c.clone()
                    .route_command(
                        cmd,
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None)),
                    )
                    .await
            }
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) if is_transient(&e) => return Err(classify(e)),
            Err(e) => {
                tracing::warn!(target: "idem", setting = name, error = %e,
                    "cannot read the Redis setting: check it by hand (docs/storage.md, \"Redis / Valkey\")");
                return Ok(vec![None]);
            }
        };
        // One node's `[name, value]`, or a cluster's `{node: [name, value]}`.
        let value = |v: &Value| match v {
            Value::Array(pair) => pair.get(1).and_then(text),
            Value::Map(pair) => pair.first().and_then(|(_, v)| text(v)),
            _ => None,
        };
        Ok(match &reply {
            Value::Map(nodes) if self.conn.is_cluster() => {
                nodes.iter().map(|(_, v)| value(v)).collect()
            }
            one => vec![value(one)],
        })
    }
}

/// Loads `script` into the server, or into every node of a cluster.
async fn load(script: &Script, conn: &mut RedisConnection) -> Result<(), StoreError> {
    script
        .prepare_invoke()
        .load_async(conn)
        .await
        .map(drop)
        .map_err(classify)
}

/// The elements of an array reply.
fn array(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

/// An integer reply (or a decimal string).
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => core::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A UTF-8 string reply.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// A binary string reply; `None` for a missing field.
fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        _ => None,
    }
}

/// Decodes `{now, idem_key, request_hash, state, operation_id, fence, resp_status,
/// resp_headers, resp_body, biz_no, locked_at, lease_until, expire_at, created_at, updated_at,
/// completed_at}`: the record (`None` when the key holds none) and the script's "now".
fn decode_record(
    key: &ScopedKey,
    items: &[Value],
) -> Result<(Option<Record>, Timestamp), StoreError> {
    let bad = |detail: String| StoreError::corrupt(Some(key), detail);
    if items.len() != 16 {
        return Err(bad(format!("{} fields instead of 16", items.len())));
    }
    let now = int(&items[0]).ok_or_else(|| bad("the script's clock".to_owned()))?;
    let now = Timestamp::from_millis(now);
    let f = &items[1..];
    if matches!(f[0], Value::Nil) && f.iter().all(|v| matches!(v, Value::Nil)) {
        return Ok((None, now));
    }
    let time = |i: usize, name: &str| {
        int(&f[i])
            .map(Timestamp::from_millis)
            .ok_or_else(|| bad(format!("{name}: missing or not a number")))
    };
    let key = text(&f[0]).ok_or_else(|| bad("idem_key".to_owned()))?;
    let request_hash = text(&f[1])
        .and_then(|h| h.parse().ok())
        .ok_or_else(|| bad("request_hash".to_owned()))?;
    let state = int(&f[2])
        .and_then(RecordState::from_code)
        .ok_or_else(|| bad("unknown state".to_owned()))?;
    let operation_id = text(&f[3]).ok_or_else(|| bad("operation_id".to_owned()))?;
    let fence = int(&f[4])
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad("fence".to_owned()))?;
    let status = match &f[5] {
        Value::Nil => None,
        v => Some(
            int(v)
                .and_then(|s| u16::try_from(s).ok())
                .filter(|s| (100..=999).contains(s))
                .ok_or_else(|| bad("response status".to_owned()))?,
        ),
    };
    let headers = match bytes(&f[6]) {
        None => Vec::new(),
        Some(h) => decode_headers(h).ok_or_else(|| bad("malformed headers".to_owned()))?,
    };
    if state != RecordState::Processing && status.is_none() {
        return Err(bad(format!("{state:?} without a response status")));
    }
    let biz_no = match &f[8] {
        Value::Nil => None,
        v => Some(text(v).ok_or_else(|| bad("biz_no".to_owned()))?),
    };
    let completed_at = match &f[14] {
        Value::Nil => None,
        _ => Some(time(14, "completed_at")?),
    };
    let record = Record {
        key,
        request_hash,
        state,
        operation_id,
        fence,
        status,
        headers,
        body: bytes(&f[7]).map(<[u8]>::to_vec).unwrap_or_default(),
        biz_no,
        locked_at: time(9, "locked_at")?,
        lease_until: time(10, "lease_until")?,
        expire_at: time(11, "expire_at")?,
        created_at: time(12, "created_at")?,
        updated_at: time(13, "updated_at")?,
        completed_at,
    };
    Ok((Some(record), now))
}

fn fenced_out(lease: &Lease) -> StoreError {
    StoreError::FencedOut {
        key_hash: lease.key.hash_hex().to_string(),
        fence: lease.fence,
    }
}

/// Transport trouble (refused, reset, timed out, dropped) and the server's "not now" answers
/// (loading a dump, a read-only replica after a failover, out of memory, a busy script,
/// cluster or primary down).
fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
        || e.code().is_some_and(|c| matches!(c, "OOM" | "BUSY"))
}

/// Maps a Redis error: transient ones (see [`is_transient`]) become
/// [`StoreError::Unavailable`], refused credentials and bad configuration
/// [`StoreError::Config`], the rest [`StoreError::Other`].
fn classify(e: RedisError) -> StoreError {
    if is_transient(&e) {
        return StoreError::unavailable(e);
    }
    match e.kind() {
        ErrorKind::AuthenticationFailed
        | ErrorKind::InvalidClientConfig
        | ErrorKind::Server(ServerErrorKind::NoPerm) => StoreError::Config {
            message: "Redis refused the connection's configuration or credentials".to_owned(),
            source: Some(Box::new(e)),
        },
        _ => StoreError::Other(Box::new(e)),
    }
}

impl Store for RedisStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            req.validate()?;
            let operation_id = new_operation_id()?;
            let mut cmd = self.script(&CLAIM, req.key, true);
            cmd.arg(req.key.readable())
                .arg(req.request_hash.to_string())
                .arg(&operation_id)
                .arg(self.now_arg())
                .arg(duration_millis(req.lease))
                .arg(duration_millis(req.ttl))
                .arg(self.margin_ms())
                .arg(req.key.hash_hex().to_string());
            let (out, behind) = self.call_durable(&CLAIM, &cmd, "claim").await?;
            let bad = |detail: &str| StoreError::corrupt(Some(req.key), detail);
            let items = array(out).ok_or_else(|| bad("unexpected reply to the claim script"))?;
            match items.first().and_then(int) {
                Some(1) => {
                    let field = |i: usize| items.get(i).and_then(int);
                    let (Some(fence), Some(lease_until), Some(expire_at), Some(took_over)) =
                        (field(1), field(3), field(4), field(5))
                    else {
                        return Err(bad("unexpected reply to the claim script"));
                    };
                    let operation_id = items
                        .get(2)
                        .and_then(text)
                        .ok_or_else(|| bad("operation_id"))?;
                    let lease = Lease {
                        key: req.key.clone(),
                        request_hash: req.request_hash,
                        fence: u64::try_from(fence).map_err(|_| bad("fence"))?,
                        operation_id,
                        lease_until: Timestamp::from_millis(lease_until),
                        expire_at: Timestamp::from_millis(expire_at),
                        took_over: took_over == 1,
                    };
                    if let Some(behind) = behind {
                        // The handler has not started: ending the lease keeps the record and
                        // its operation id (nothing is deleted), so that the retry takes over
                        // at once, or claims afresh if a failover lost this claim, which no
                        // effect depends on. Best effort: an unended lease only makes the
                        // retry wait for it.
                        let _ = self.abandon(&lease).await;
                        return Err(StoreError::unavailable(behind));
                    }
                    Ok(Claim::Acquired(lease))
                }
                Some(2) => {
                    let request_hash = items
                        .get(1)
                        .and_then(text)
                        .and_then(|h| h.parse().ok())
                        .ok_or_else(|| bad("request_hash"))?;
                    let retry_after = items.get(2).and_then(int).ok_or_else(|| bad("lease"))?;
                    Ok(Claim::InProgress {
                        request_hash,
                        retry_after: Duration::from_millis(retry_after.max(0) as u64),
                    })
                }
                Some(3) => {
                    let (record, _) = decode_record(req.key, &items[1..])?;
                    record.map(Claim::Completed).ok_or_else(|| bad("vanished"))
                }
                _ => Err(bad(&items.get(1).and_then(text).unwrap_or_else(|| {
                    "unexpected reply to the claim script".to_owned()
                }))),
            }
        })
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            completion.validate()?;
            // Redis keeps at most 512 MiB in one string (`proto-max-bulk-len`): a larger
            // result would be refused the same way on every try.
            completion.fits(512 << 20)?;
            let state = RecordState::from(completion.outcome).code();
            let mut cmd = self.script(&COMPLETE, &lease.key, true);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(state)
                .arg(completion.status)
                .arg(encode_headers(&completion.headers))
                .arg(&completion.body[..])
                .arg(if completion.biz_no.is_some() {
                    "1"
                } else {
                    "0"
                })
                .arg(completion.biz_no.as_deref().unwrap_or(""))
                .arg(
                    completion
                        .expire_at
                        .map(|t| t.as_millis().to_string())
                        .unwrap_or_default(),
                )
                .arg(self.now_arg())
                .arg(self.margin_ms())
                .arg(lease.key.hash_hex().to_string());
            let (out, behind) = self.call_durable(&COMPLETE, &cmd, "completion").await?;
            match int(&out) {
                Some(1 | 2) => behind.map_or(Ok(()), |b| Err(StoreError::unavailable(b))),
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&RELEASE, &lease.key, true);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(lease.key.hash_hex().to_string());
            match int(&self.call(&RELEASE, &cmd).await?) {
                Some(1) => Ok(()),
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&ABANDON, &lease.key, false);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(self.now_arg());
            match int(&self.call(&ABANDON, &cmd).await?) {
                Some(1) => Ok(()),
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn extend<'a>(
        &'a self,
        lease: &'a Lease,
        by: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&EXTEND, &lease.key, true);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(duration_millis(by))
                .arg(self.now_arg())
                .arg(self.margin_ms())
                .arg(lease.key.hash_hex().to_string());
            let (out, behind) = self.call_durable(&EXTEND, &cmd, "lease extension").await?;
            let items = array(out).unwrap_or_default();
            match (
                items.first().and_then(int),
                items.get(1).and_then(int),
                items.get(2).and_then(int),
            ) {
                (Some(1), Some(lease_until), Some(expire_at)) => match behind {
                    Some(behind) => Err(StoreError::unavailable(behind)),
                    None => Ok(Lease {
                        lease_until: Timestamp::from_millis(lease_until),
                        expire_at: Timestamp::from_millis(expire_at),
                        ..lease.clone()
                    }),
                },
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn get<'a>(&'a self, key: &'a ScopedKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&GET, key, false);
            cmd.arg(self.now_arg());
            let items = array(self.call(&GET, &cmd).await?).ok_or_else(|| {
                StoreError::corrupt(Some(key), "unexpected reply to the read script")
            })?;
            let (record, now) = decode_record(key, &items)?;
            Ok(record.filter(|r| !r.is_expired(now)))
        })
    }

    /// On one server, deletes up to `batch` expired records along the index. On a cluster
    /// there is no index to walk, and nothing to do: Redis deletes every record by itself
    /// [the expiry margin](RedisStore::with_expiry_margin) after its `expire_at`, on every
    /// shard at once, and an expired record is absent to every operation meanwhile. Answers 0
    /// there.
    fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let Some(index) = &self.index else {
                return Ok(0);
            };
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(PURGE.get_hash())
                .arg(1)
                .arg(&**index)
                .arg(self.now_arg())
                .arg(batch.max(1))
                .arg(&*self.records);
            int(&self.call(&PURGE, &cmd).await?)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| StoreError::Other("unexpected reply to the purge script".into()))
        })
    }

    /// Refuses a server (or a cluster node) that evicts keys, warns about persistence settings
    /// that lose acknowledged claims on a crash, about a cluster prefix that puts every record
    /// on one shard, and loads the scripts. A server that forbids `CONFIG` (some managed
    /// services) is only warned about.
    fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            for policy in self.config("maxmemory-policy").await?.into_iter().flatten() {
                if policy != "noeviction" {
                    return Err(StoreError::Config {
                        message: format!(
                            "Redis evicts keys (`maxmemory-policy {policy}`): an evicted record lets a retry run its operation again; set `maxmemory-policy noeviction`"
                        ),
                        source: None,
                    });
                }
            }
            let appendonly = self.config("appendonly").await?;
            let fsync = self.config("appendfsync").await?;
            if appendonly.iter().any(|a| a.as_deref() == Some("no"))
                || fsync.iter().flatten().any(|f| f != "always")
            {
                let show = |v: &[Option<String>]| {
                    v.iter()
                        .map(|v| v.as_deref().unwrap_or("?"))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                tracing::warn!(target: "idem",
                    appendonly = show(&appendonly),
                    appendfsync = show(&fsync),
                    "Redis may lose acknowledged claims and completions on a crash, and a lost one lets a retry run its operation again: `appendonly yes` and `appendfsync always` keep them (docs/storage.md, \"Redis / Valkey\")");
            }
            if self.is_cluster() && self.records.contains('{') {
                tracing::warn!(target: "idem", prefix = &*self.records,
                    "the key prefix holds a hash tag: every record of this store lands in one slot, on one shard of the cluster; drop the braces to spread them");
            }
            let mut conn = self.conn.clone();
            for script in [
                &*CLAIM, &*COMPLETE, &*RELEASE, &*ABANDON, &*EXTEND, &*GET, &*PURGE,
            ] {
                load(script, &mut conn).await?;
            }
            Ok(())
        })
    }

    fn clock(&self) -> &dyn Clock {
        match &self.clock {
            Some(c) => &**c,
            None => &SystemClock,
        }
    }
}
