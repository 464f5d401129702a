//! The Galera runs: three processes of the example, each on its own node of the MariaDB
//! Galera cluster `scripts/test` starts (`IDEM_TEST_GALERA_URLS`, its directory in
//! `IDEM_TEST_GALERA_DIR`), clients paying through all three; under load one node is killed
//! (`SIGKILL`) and restarted, or cut off from the others (non-primary) and let back. The cluster
//! has its three nodes again when a run ends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::{
    Seen, Shape, Target, assert_kept, db, db_quiet, judge, load, lost_records, resend_all,
};
use crate::chaos::client;
use crate::chaos::fleet::{Database, Fleet};
use crate::chaos::report;
use crate::chaos::rng::seed;

/// What happens to one node under load.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Node 2 dies (`SIGKILL`), then restarts and rejoins (incremental state transfer).
    Kill,
    /// Node 3 is cut off from the others' group communication: it turns non-primary and
    /// refuses reads and writes (1047); then it is let back.
    Split,
}

/// Payments through three processes, one per node, while `fault` strikes one node. The promise
/// must hold: every key one payment under one operation id, every answer of a key the same
/// payment, no `500`, every `503` with `Retry-After`; and while a node is split off, a new key
/// sent to its process is refused, not run.
pub async fn galera(fault: Fault, shape: Shape) -> Option<()> {
    let dir = crate::servers::server_url("IDEM_TEST_GALERA_DIR")?;
    let name = match fault {
        Fault::Kill => "galera, a node killed",
        Fault::Split => "galera, a node split off",
    };
    let began = Instant::now();
    let database = Database::on_galera().await?;
    let fleet = Fleet::start(
        &database,
        3,
        &[
            ("PAYMENTS_DELAY_MS", "20".to_owned()),
            ("PAYMENTS_STORE_TIMEOUT_MS", "2000".to_owned()),
        ],
    )
    .await;
    let seed = seed();
    report(&format!("failover {name}: seed {seed}, {shape:?}"));
    let target = Arc::new(Target {
        addrs: fleet.addrs(),
        path: "/v1/payments",
        tag: crate::servers::unique("gal"),
    });
    let (seen, stop) = (Arc::new(Seen::default()), Arc::new(AtomicBool::new(false)));
    let sending = tokio::spawn(load(
        target.clone(),
        seen.clone(),
        stop.clone(),
        shape.clients,
        seed,
    ));

    tokio::time::sleep(shape.before_kill).await;
    let struck = Instant::now();
    let mut heal = Heal {
        dir: &dir,
        fault,
        healed: false,
    };
    match fault {
        Fault::Kill => {
            db(&["galera-kill", &dir, "2"], &[]);
            db(&["galera-restart", &dir, "2"], &[]);
        }
        Fault::Split => {
            db(&["galera-isolate", &dir, "3", "on"], &[]);
            db(&["galera-wait-non-primary", &dir, "3"], &[]);
            refused_while_split(&target, fleet.addrs()[2], &database).await;
            db(&["galera-isolate", &dir, "3", "off"], &[]);
            db(&["galera-wait", &dir, "3", "3"], &[]);
        }
    }
    heal.healed = true;
    report(&format!(
        "failover {name}: the cluster has its three nodes again after {} ms",
        struck.elapsed().as_millis()
    ));
    tokio::time::sleep(shape.after_recovery).await;
    stop.store(true, Ordering::Relaxed);
    let keys = sending.await.unwrap();
    let records: BTreeSet<String> = database
        .records()
        .await
        .into_iter()
        .map(|r| r.client_key)
        .collect();
    let lost = lost_records(&seen, |i| {
        let held = records.contains(&target.key(i));
        async move { held }
    })
    .await;
    resend_all(target.clone(), seen.clone(), keys, shape.clients, seed ^ 1).await;
    report(&format!(
        "failover {name}: {} ms in all",
        began.elapsed().as_millis()
    ));
    fleet.assert_alive();

    let index = |order: &str| (0..keys).find(|&i| target.order(i) == order);
    let mut effects: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    for p in database.payments().await {
        if let Some(i) = index(&p.order_id) {
            effects
                .entry(i)
                .or_default()
                .insert((p.payment_id, p.operation_id));
        }
    }
    let verdict = judge(name, keys, &seen, &effects, lost);
    assert_kept(name, &verdict);
    Some(())
}

/// A new key sent to the process of the node split off is answered `503` + `Retry-After`, and
/// nothing ran: the node refuses the claim (1047) rather than the handler running unprotected.
async fn refused_while_split(target: &Target, addr: std::net::SocketAddr, database: &Database) {
    let key = usize::MAX / 2;
    let raw = target.request(key);
    let r = client::exchange(addr, &raw, std::time::Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("the split node's process did not answer: {e:?}"));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.retry_after().is_some(), "a 503 without Retry-After");
    let order = target.order(key);
    assert!(
        !database
            .payments()
            .await
            .iter()
            .any(|p| p.order_id == order),
        "the split node's process ran the payment"
    );
}

/// Brings the struck node back when a run fails before it did: a node left down or split off
/// would fail the tests that use the cluster after this one.
struct Heal<'a> {
    dir: &'a str,
    fault: Fault,
    healed: bool,
}

impl Drop for Heal<'_> {
    fn drop(&mut self) {
        if self.healed {
            return;
        }
        match self.fault {
            Fault::Kill => db_quiet(&["galera-restart", self.dir, "2"]),
            Fault::Split => {
                db_quiet(&["galera-isolate", self.dir, "3", "off"]);
                db_quiet(&["galera-wait", self.dir, "3", "3"]);
            }
        }
    }
}
