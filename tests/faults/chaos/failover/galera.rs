//! The Galera runs: three processes of the example, each on its own node of the MariaDB
//! Galera cluster `scripts/test` starts (`IDEM_TEST_GALERA_URLS`, its directory in
//! `IDEM_TEST_GALERA_DIR`), clients paying through all three; under load one node is killed
//! (`SIGKILL`) and restarted, or cut off from the others (non-primary) and let back. The cluster
//! has its three nodes again when a run ends.

use std::time::Instant;

use super::{
    Sending, Shape, Target, assert_kept, db, db_quiet, effects_in, judge, lost_in, payments_fleet,
};
use crate::chaos::client;
use crate::chaos::fleet::Database;
use crate::chaos::report;

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
    let fleet = payments_fleet(&database, 3).await;
    let target = Target {
        addrs: fleet.addrs(),
        path: "/v1/payments",
        tag: crate::servers::unique("gal"),
    };
    let mut sending = Sending::start(name, target, &shape);

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
            refused_while_split(&sending.target, fleet.addrs()[2], &database).await;
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
    let keys = sending.stop().await;
    let lost = lost_in(&database, &sending).await;
    sending.resend_all(keys, shape.clients).await;
    report(&format!(
        "failover {name}: {} ms in all",
        began.elapsed().as_millis()
    ));
    fleet.assert_alive();

    let effects = effects_in(&database, keys, &sending.target).await;
    let verdict = judge(name, keys, &sending.seen, &effects, lost);
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
