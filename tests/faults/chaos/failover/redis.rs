//! The Redis Cluster run: a cluster of the test's own, an in-process handler whose effect is a
//! ledger out of Redis's reach.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use super::proxy::Proxy;
use super::{
    LAG, Sending, Shape, Target, assert_kept, db, db_quiet, installed, judge, lost_records, path,
    server_dir,
};
use crate::chaos::report;

/// A Redis Cluster of the test's own: 3 masters, 1 replica each.
struct RedisCluster {
    dir: tempfile::TempDir,
    url: String,
}

impl RedisCluster {
    fn start() -> RedisCluster {
        let dir = server_dir();
        let port = db(&["redis-cluster-init", &path(dir.path(), "cluster")], &[]);
        RedisCluster {
            url: format!("redis://127.0.0.1:{port}"),
            dir,
        }
    }

    fn node_dirs(&self) -> Vec<PathBuf> {
        (1..=6)
            .map(|i| self.dir.path().join(format!("cluster/node{i}")))
            .collect()
    }

    fn port(node: &Path) -> String {
        std::fs::read_to_string(node.join("port"))
            .unwrap()
            .trim()
            .to_owned()
    }

    fn cli(port: &str, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", port])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The node directory of a master that serves slots.
    fn a_master(&self) -> PathBuf {
        self.node_dirs()
            .into_iter()
            .find(|n| Self::cli(&Self::port(n), &["info", "replication"]).contains("role:master"))
            .expect("a master")
    }

    /// Puts `master` behind a proxy: it announces the proxy's port to the cluster, so that
    /// its replica (and every client) reconnect through it; only the replica's link stalls.
    /// Answers the proxy and the replica's node directory.
    async fn behind_a_proxy(&self, master: &Path) -> (Proxy, PathBuf) {
        let port = Self::port(master);
        let proxy =
            Proxy::start_marking(format!("127.0.0.1:{port}").parse().unwrap(), Some(b"PSYNC"))
                .await;
        let announced = proxy.addr.port().to_string();
        let set = Self::cli(
            &port,
            &["config", "set", "cluster-announce-port", &announced],
        );
        assert_eq!(set.trim(), "OK");
        let started = Instant::now();
        loop {
            let replica = self.node_dirs().into_iter().find(|n| {
                let info = Self::cli(&Self::port(n), &["info", "replication"]);
                info.contains(&format!("master_port:{announced}\r"))
                    && info.contains("master_link_status:up")
            });
            if let Some(replica) = replica {
                return (proxy, replica);
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the replica did not reconnect through the proxy"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `SIGKILL`s the node in `node`.
    fn kill(node: &Path) {
        let pid = std::fs::read_to_string(node.join("redis.pid")).unwrap();
        let status = Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits until the cluster has failed `killed` over to `replica` (a master now, and the
    /// cluster serving every slot), then starts `killed` again and waits until it is a replica
    /// in sync: the promoted master has a replica to acknowledge its writes again.
    async fn heal(&self, killed: &Path, replica: &Path) -> Duration {
        let started = Instant::now();
        let port = Self::port(killed);
        let promoted = Self::port(replica);
        loop {
            let role = Self::cli(&promoted, &["info", "replication"]);
            let ok = Self::cli(&promoted, &["cluster", "info"]).contains("cluster_state:ok");
            if role.contains("role:master") && ok {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no failover:\n{}",
                Self::cli(&promoted, &["cluster", "nodes"])
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let failed_over = started.elapsed();
        db(&["redis-start", &killed.display().to_string()], &[]);
        loop {
            let info = Self::cli(&port, &["info", "replication"]);
            if info.contains("role:slave") && info.contains("master_link_status:up") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "the killed node did not rejoin as a replica:\n{info}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        failed_over
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        db_quiet(&["redis-cluster-stop", &path(self.dir.path(), "cluster")]);
    }
}

mod ledger {
    //! The payment endpoint of the Redis runs: its effect is a ledger kept in the test
    //! process, as a payment processor's would be, out of reach of the store's failover.

    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use axum::extract::{FromRef, State};
    use axum::http::StatusCode;
    use idem::axum::Json;
    use idem::{Fingerprint, Idem, Snapshot, idempotent};

    /// Per order, the payments made and their operation ids.
    pub type Ledger = Arc<Mutex<BTreeMap<String, BTreeSet<(String, String)>>>>;

    #[derive(Clone)]
    pub struct App {
        pub idem: Idem,
        pub ledger: Ledger,
    }

    impl FromRef<App> for Idem {
        fn from_ref(app: &App) -> Idem {
            app.idem.clone()
        }
    }

    #[derive(serde::Deserialize, Fingerprint)]
    pub struct CreatePayment {
        amount: String,
        currency: String,
        customer_id: String,
        order_id: String,
    }

    #[derive(serde::Serialize, Snapshot)]
    pub struct Payment {
        #[snapshot(biz_no)]
        payment_id: String,
        order_id: String,
        amount: String,
        currency: String,
        customer_id: String,
    }

    /// Charges once per operation: the processor's own idempotency key is the operation id, so
    /// a takeover (same operation) charges nothing more, a second operation charges again. A
    /// short lease: a claim whose holder lost its master mid-request is taken over 2 s later.
    #[idempotent(scope = global, contract = "exact_replay", lease = "2s")]
    pub async fn create_payment(
        State(app): State<App>,
        Json(req): Json<CreatePayment>,
    ) -> (StatusCode, Json<Payment>) {
        let op = idem::operation_id()
            .expect("inside an operation")
            .to_string();
        let payment_id = format!("pay_{}", &op[..op.len().min(24)]);
        tokio::time::sleep(Duration::from_millis(20)).await;
        app.ledger
            .lock()
            .unwrap()
            .entry(req.order_id.clone())
            .or_default()
            .insert((payment_id.clone(), op));
        (
            StatusCode::CREATED,
            Json(Payment {
                payment_id,
                order_id: req.order_id,
                amount: req.amount,
                currency: req.currency,
                customer_id: req.customer_id,
            }),
        )
    }
}

/// Payments through an in-process handler on a Redis Cluster whose master dies mid-load.
pub async fn redis_cluster(acks: bool, shape: Shape) -> Option<usize> {
    use idem::RedisStore;
    use idem::store::Store as _;

    if !installed("redis-server") {
        return None;
    }
    let name = if acks {
        "redis cluster with WAIT 1"
    } else {
        "redis cluster asynchronous"
    };
    let began = Instant::now();
    let cluster = RedisCluster::start();
    let master = cluster.a_master();
    let (link, replica) = cluster.behind_a_proxy(&master).await;
    let mut store = RedisStore::connect(&cluster.url).await.unwrap();
    assert!(store.is_cluster());
    if acks {
        store = store.with_replica_acks(1, Duration::from_millis(500));
    }
    store.migrate().await.unwrap();
    let ledger = ledger::Ledger::default();
    let app = ledger::App {
        idem: idem::Idem::new(store.clone()).with_store_timeout(Duration::from_secs(2)),
        ledger: ledger.clone(),
    };
    let router = axum::Router::new()
        .route("/payments", axum::routing::post(ledger::create_payment))
        .with_state(app);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let target = Target {
        addrs: vec![addr],
        path: "/payments",
        tag: crate::servers::unique("rc"),
    };
    let set_up = began.elapsed();
    let mut sending = Sending::start(name, target, &shape);

    tokio::time::sleep(shape.before_kill).await;
    link.stall(true);
    tokio::time::sleep(LAG).await;
    RedisCluster::kill(&master);
    link.cut();
    let failed_over = cluster.heal(&master, &replica).await;
    report(&format!(
        "failover {name}: master killed, replica promoted after {} ms, killed node back as a replica",
        failed_over.as_millis()
    ));
    tokio::time::sleep(shape.after_recovery).await;
    let keys = sending.stop().await;
    let lost = lost_records(&sending.seen, |i| {
        let (store, key) = (store.clone(), sending.target.key(i));
        async move {
            let key = idem::key::ScopedKey::new::<&str>(&[], "POST /payments", &key).unwrap();
            store.get(&key).await.unwrap().is_some()
        }
    })
    .await;
    let loaded = began.elapsed();
    sending.resend_all(keys, shape.clients).await;
    report(&format!(
        "failover {name}: set up in {} ms, load until {} ms, resent until {} ms",
        set_up.as_millis(),
        loaded.as_millis(),
        began.elapsed().as_millis()
    ));
    server.abort();

    let index = |order: &str| (0..keys).find(|&i| sending.target.order(i) == order);
    let effects = ledger
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(order, made)| Some((index(order)?, made.clone())))
        .collect();
    let verdict = judge(name, keys, &sending.seen, &effects, lost);
    if acks {
        assert_kept(name, &verdict);
    } else {
        assert!(
            sending.seen.unfinished.lock().unwrap().is_empty(),
            "the service did not resume"
        );
    }
    Some(verdict.twice)
}
