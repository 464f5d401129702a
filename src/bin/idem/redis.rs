//! `idem rekey` on the Redis store: its records (`<prefix>rec:<key hash>`, one hash each) found
//! with `SCAN` on the server, or on every primary of a cluster, and each read and rewritten by a
//! script on its own key, so on a cluster on its slot's primary. The scripts are the store's own
//! operator scripts (`idem::store::redis::scripts`): they follow its record's state, expiry (by
//! the server's clock) and row version `rev`, which every write of the store increments.

use idem::RedisStore;
use idem::seal::StoredResponse;
use idem::store::redis::scripts;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{FromRedisValue, Script, ScriptInvocation};

use crate::args::{hex, parse_hash};
use crate::error::Error;
use crate::record::StoredRow;

/// The connection `rekey` speaks on (cheap to clone: both multiplex).
#[derive(Clone)]
enum Conn {
    Server(idem::store::redis::RedisConnection),
    Cluster(ClusterConnection),
}

/// A Redis store opened by the CLI.
pub(crate) struct RedisDb {
    pub(crate) store: RedisStore,
    conn: Conn,
    /// `<prefix>rec:`.
    records: String,
    read: Script,
    rewrite: Script,
}

/// Where a `SCAN` of the records stands: the nodes still to scan (`None`: the one server) and
/// the cursor on the first of them.
pub(crate) struct Scan {
    nodes: Vec<Option<(String, u16)>>,
    cursor: u64,
}

impl RedisDb {
    /// The store at `url` (a server, or a cluster's seed nodes, comma-separated) with its
    /// records under `prefix`.
    pub(crate) async fn connect(url: &str, prefix: &str) -> Result<RedisDb, Error> {
        let store = RedisStore::connect(url).await?.with_prefix(prefix);
        let conn = if store.is_cluster() {
            let nodes: Vec<&str> = url.split(',').map(str::trim).collect();
            let client = RedisStore::cluster_client(&nodes)?;
            Conn::Cluster(client.get_async_connection().await?)
        } else {
            Conn::Server(store.connection().clone())
        };
        Ok(RedisDb {
            records: store.records_prefix().to_owned(),
            store,
            conn,
            read: Script::new(scripts::READ_STORED),
            rewrite: Script::new(scripts::REWRITE_STORED),
        })
    }

    /// A scan from the start: every primary of a cluster (`CLUSTER NODES`), or the server.
    pub(crate) async fn scan(&self) -> Result<Scan, Error> {
        let nodes = match self.conn.clone() {
            Conn::Server(_) => vec![None],
            Conn::Cluster(mut c) => {
                let text: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut c)
                    .await?;
                primaries(&text).into_iter().map(Some).collect()
            }
        };
        Ok(Scan { nodes, cursor: 0 })
    }

    /// The next records of `scan`, about `count` keys' worth (`SCAN` may answer fewer or more);
    /// `None` once every node is scanned.
    pub(crate) async fn next_page(
        &self,
        scan: &mut Scan,
        count: u32,
    ) -> Result<Option<Vec<StoredRow>>, Error> {
        let Some(node) = scan.nodes.first().cloned() else {
            return Ok(None);
        };
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(scan.cursor)
            .arg("MATCH")
            .arg(format!("{}*", glob_escape(&self.records)))
            .arg("COUNT")
            .arg(count);
        let (cursor, keys): (u64, Vec<String>) = match (self.conn.clone(), node) {
            (Conn::Server(mut c), _) => cmd.query_async(&mut c).await?,
            (Conn::Cluster(mut c), Some((host, port))) => {
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                FromRedisValue::from_redis_value(c.route_command(cmd, routing).await?)?
            }
            (Conn::Cluster(_), None) => unreachable!("a cluster's nodes have addresses"),
        };
        if cursor == 0 {
            scan.nodes.remove(0);
        }
        scan.cursor = cursor;
        let mut rows = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(row) = self.read(&key).await? {
                rows.push(row);
            }
        }
        Ok(Some(rows))
    }

    /// The live stored record of `key_hash`, if it still is one.
    pub(crate) async fn stored_row(&self, key_hash: &[u8]) -> Result<Option<StoredRow>, Error> {
        let key = format!("{}{}", self.records, hex(key_hash));
        self.read(&key).await
    }

    async fn read(&self, key: &str) -> Result<Option<StoredRow>, Error> {
        let Some(hash) = key.strip_prefix(&self.records) else {
            return Ok(None);
        };
        let Ok(key_hash) = parse_hash(hash, "a record key") else {
            return Ok(None);
        };
        let mut invocation = self.read.key(key);
        let fields: Vec<Vec<u8>> = invoke(self.conn.clone(), &mut invocation).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let Ok(
            [
                rev,
                idem_key,
                headers,
                body,
                biz_no,
                operation_id,
                request_hash,
                status,
                state,
            ],
        ) = <[Vec<u8>; 9]>::try_from(fields)
        else {
            return Err("the record read script answered an unexpected reply".into());
        };
        Ok(Some(StoredRow {
            key_hash,
            idem_key: String::from_utf8(idem_key)?,
            operation_id: String::from_utf8(operation_id)?,
            request_hash: String::from_utf8(request_hash)?,
            resp_status: String::from_utf8(status)?.parse().ok(),
            state: String::from_utf8(state)?.parse()?,
            rev: String::from_utf8(rev)?.parse()?,
            resp_headers: Some(headers),
            resp_body: Some(body),
            biz_no: (!biz_no.is_empty()).then(|| String::from_utf8_lossy(&biz_no).into_owned()),
        }))
    }

    /// Writes `new` over the response of `row` if its `rev` is still the one read: whether it
    /// was.
    pub(crate) async fn rewrite(
        &self,
        row: &StoredRow,
        idem_key: &str,
        new: &StoredResponse,
    ) -> Result<bool, Error> {
        let key = format!("{}{}", self.records, hex(&row.key_hash));
        let mut invocation = self.rewrite.key(key);
        invocation
            .arg(row.rev)
            .arg(idem_key)
            .arg(&new.headers)
            .arg(&new.body)
            .arg(&row.operation_id)
            .arg(new.biz_no.as_deref().unwrap_or_default());
        let done: i64 = invoke(self.conn.clone(), &mut invocation).await?;
        Ok(done == 1)
    }
}

async fn invoke<T: FromRedisValue>(
    conn: Conn,
    invocation: &mut ScriptInvocation<'_>,
) -> Result<T, Error> {
    Ok(match conn {
        Conn::Server(mut c) => invocation.invoke_async(&mut c).await?,
        Conn::Cluster(mut c) => invocation.invoke_async(&mut c).await?,
    })
}

/// The addresses of the live primaries in `CLUSTER NODES`' answer.
fn primaries(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut f = line.split(' ');
            let (_, addr, flags) = (f.next()?, f.next()?, f.next()?);
            let primary = flags.split(',').any(|x| x == "master")
                && !flags.split(',').any(|x| x == "fail" || x == "noaddr");
            let (host, port) = addr.split('@').next()?.rsplit_once(':')?;
            primary.then(|| Some((host.to_owned(), port.parse().ok()?)))?
        })
        .collect()
}

/// `s` with the characters `SCAN`'s `MATCH` pattern gives a meaning escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
