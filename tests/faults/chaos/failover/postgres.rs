//! The PostgreSQL run: a primary with a streaming standby, two processes of the example behind
//! a virtual IP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::proxy::Proxy;
use super::{
    LAG, Sending, Shape, Target, assert_kept, db, db_quiet, effects_in, judge, lost_in, path,
    payments_fleet, server_dir,
};
use crate::chaos::fleet::{Backend, Database};
use crate::chaos::report;

/// A primary and a streaming standby of the test's own, with PostgreSQL's durable defaults;
/// the standby streams through `link`.
struct PgPair {
    dir: tempfile::TempDir,
    primary: SocketAddr,
    standby: SocketAddr,
    link: Proxy,
}

impl PgPair {
    /// `synchronous`: the primary waits for the standby at every commit.
    async fn start(synchronous: bool) -> PgPair {
        let dir = server_dir();
        let (p, s) = (path(dir.path(), "primary"), path(dir.path(), "standby"));
        let primary_port = db(&["free-port"], &[]);
        db(&["pg-init", &p, &primary_port], &[("PG_DURABLE", "1")]);
        let primary: SocketAddr = format!("127.0.0.1:{primary_port}").parse().unwrap();
        let link = Proxy::start(primary).await;
        let standby_port = db(&["free-port"], &[]);
        let from = link.addr.port().to_string();
        db(&["pg-standby-init", &p, &s, &standby_port, &from], &[]);
        let pair = PgPair {
            primary,
            standby: format!("127.0.0.1:{standby_port}").parse().unwrap(),
            link,
            dir,
        };
        let admin = sqlx::PgPool::connect(&pair.url(pair.primary, "postgres", "postgres"))
            .await
            .unwrap();
        if synchronous {
            // After the base backup: the standby, once promoted, has no standby of its own to
            // wait for, and must not wait for one.
            for sql in [
                "ALTER SYSTEM SET synchronous_standby_names = '*'",
                "SELECT pg_reload_conf()",
            ] {
                sqlx::query(sql).execute(&admin).await.unwrap();
            }
        }
        let want = if synchronous { "sync" } else { "async" };
        let started = Instant::now();
        loop {
            let states: Vec<(String,)> = sqlx::query_as(
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .fetch_all(&admin)
            .await
            .unwrap();
            if states.iter().any(|(s,)| s == want) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the standby is not streaming ({want}): {states:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        admin.close().await;
        pair.check_replication(synchronous).await;
        pair
    }

    /// What idem says about the pair: the primary keeps commits through a failover exactly
    /// when it waits for the standby, and the standby is refused as a store.
    async fn check_replication(&self, synchronous: bool) {
        use idem::store::Store as _;
        let primary = idem::PostgresStore::connect(&self.url(self.primary, "app", "appdb"))
            .await
            .unwrap();
        let r = primary.replication().await.unwrap();
        assert_eq!(r.streaming_standbys, 1, "{r:?}");
        assert_eq!(r.keeps_commits_through_failover(), synchronous, "{r:?}");
        primary.pool().close().await;
        let standby = idem::PostgresStore::connect(&self.url(self.standby, "app", "appdb"))
            .await
            .unwrap();
        match standby.migrate().await {
            Err(idem::store::StoreError::Config { message, .. }) => {
                assert!(message.contains("standby"), "{message}");
            }
            other => panic!("a standby accepted as the store: {other:?}"),
        }
        standby.pool().close().await;
    }

    fn url(&self, server: SocketAddr, user: &str, db: &str) -> String {
        let password = if user == "app" { ":app" } else { "" };
        format!("postgres://{user}{password}@{server}/{db}")
    }

    /// Kills the primary and cuts the replication link: what the standby had not received
    /// is lost with the primary.
    fn kill_primary(&self) {
        db(&["pg-kill", &path(self.dir.path(), "primary")], &[]);
        self.link.cut();
    }

    fn promote_standby(&self) {
        db(&["pg-promote", &path(self.dir.path(), "standby")], &[]);
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        for server in ["primary", "standby"] {
            db_quiet(&["pg-stop", &path(self.dir.path(), server)]);
        }
    }
}

/// Payments through two processes of the example on a primary that dies mid-load.
pub async fn postgres(synchronous: bool, shape: Shape) -> Option<usize> {
    // `scripts/test` starts PostgreSQL, so its binaries are here.
    crate::servers::server_url("IDEM_TEST_POSTGRES_URL")?;
    let name = if synchronous {
        "postgres synchronous standby"
    } else {
        "postgres asynchronous standby"
    };
    let began = Instant::now();
    let pair = PgPair::start(synchronous).await;
    let proxy = Proxy::start(pair.primary).await;
    let database = Database::at(Backend::Postgres, pair.url(proxy.addr, "app", "appdb"));
    let fleet = payments_fleet(&database, 2).await;
    let target = Target {
        addrs: fleet.addrs(),
        path: "/v1/payments",
        tag: crate::servers::unique("pg"),
    };
    let set_up = began.elapsed();
    let mut sending = Sending::start(name, target, &shape);

    tokio::time::sleep(shape.before_kill).await;
    pair.link.stall(true);
    tokio::time::sleep(LAG).await;
    pair.kill_primary();
    let killed = Instant::now();
    pair.promote_standby();
    proxy.switch(pair.standby);
    report(&format!(
        "failover {name}: primary killed, standby promoted and in place after {} ms",
        killed.elapsed().as_millis()
    ));
    tokio::time::sleep(shape.after_recovery).await;
    let keys = sending.stop().await;
    let promoted = Database::at(Backend::Postgres, pair.url(pair.standby, "app", "appdb"));
    let lost = lost_in(&promoted, &sending).await;
    let loaded = began.elapsed();
    sending.resend_all(keys, shape.clients).await;
    report(&format!(
        "failover {name}: set up in {} ms, load until {} ms, resent until {} ms",
        set_up.as_millis(),
        loaded.as_millis(),
        began.elapsed().as_millis()
    ));
    fleet.assert_alive();

    // The payments the promoted standby holds.
    let effects = effects_in(&promoted, keys, &sending.target).await;
    let verdict = judge(name, keys, &sending.seen, &effects, lost);
    if synchronous {
        assert_kept(name, &verdict);
    } else {
        assert!(
            sending.seen.unfinished.lock().unwrap().is_empty(),
            "the service did not resume"
        );
    }
    Some(verdict.twice)
}
