//! The store's connection to Redis ([`RedisConnection`]: a server's or a cluster's) and what
//! goes over it: the script calls, `WAIT` for the replicas, `CONFIG GET`, the loading of the
//! scripts, and the classification of Redis's errors.
//!
//! The rule: a call whose script the server does not know (`NOSCRIPT`: a restarted server, a
//! replica promoted since the scripts were loaded) loads it and is sent once more; nothing else
//! is sent again here.

use core::fmt;
use std::sync::atomic::Ordering;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Script, ServerErrorKind, Value};

use super::decode::text;
use super::{RedisStore, ReplicasBehind};
use crate::key::ScopedKey;
use crate::store::clock::duration_millis;
use crate::store::error::StoreError;

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
pub struct RedisConnection(pub(super) Connection);

#[derive(Clone)]
pub(super) enum Connection {
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

impl RedisStore {
    /// `EVALSHA` of `script` on `key`'s record, and on the indexes too (expiries, then
    /// remembered responses) when `indexed` and the store has them; the caller adds the
    /// arguments.
    pub(super) fn script(&self, script: &Script, key: &ScopedKey, indexed: bool) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash());
        match (&self.index, &self.responses) {
            (Some(index), Some(responses)) if indexed => cmd
                .arg(3)
                .arg(self.record_key(key))
                .arg(&**index)
                .arg(&**responses),
            _ => cmd.arg(1).arg(self.record_key(key)),
        };
        cmd
    }

    /// Sends one script call, loading the script first when the server does not know it (a
    /// restarted server, a replica promoted since
    /// [`Store::migrate`](crate::store::Store::migrate)).
    pub(super) async fn call(&self, script: &Script, cmd: &Cmd) -> Result<Value, StoreError> {
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
    pub(super) async fn call_durable(
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
    pub(super) async fn config(
        &self,
        name: &'static str,
    ) -> Result<Vec<Option<String>>, StoreError> {
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
pub(super) async fn load(script: &Script, conn: &mut RedisConnection) -> Result<(), StoreError> {
    script
        .prepare_invoke()
        .load_async(conn)
        .await
        .map(drop)
        .map_err(classify)
}

/// Transport trouble (refused, reset, timed out, dropped) and the server's "not now" answers
/// (loading a dump, a read-only replica after a failover, out of memory, a busy script,
/// cluster or primary down).
pub(super) fn is_transient(e: &RedisError) -> bool {
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
pub(super) fn classify(e: RedisError) -> StoreError {
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
