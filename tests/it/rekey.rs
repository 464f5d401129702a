//! Key rotation with `idem rekey` (`src/bin/idem/`) while a service serves the records it
//! rewrites, on every SQL store, Redis and a Redis Cluster; `idem inspect` with and without the
//! key ring, on every SQL store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use idem::RedisStore;
use idem::store::Store;

use crate::backends::{Backend, Database, backend_tests, on_database};
use crate::cli::{field, idem_with, ok_with, stderr};
use crate::encryption::{app, pay, ring, scoped};
use crate::servers::unique;

/// The keys of `ring(&[("k1", 1)])` .. `("k3", 3)` as `IDEM_ENCRYPTION_KEYS` writes them.
const K1: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const K2: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
const K3: &str = "k3:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=";

/// The CLI on one store: its URL and, on Redis, its key prefix.
struct Cli {
    url: String,
    prefix: Option<String>,
}

impl Cli {
    fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        // `--redis-prefix` is an option of the subcommand, the first argument.
        let mut all: Vec<&str> = args[..1].to_vec();
        if let Some(p) = &self.prefix {
            all.extend(["--redis-prefix", p]);
        }
        all.extend_from_slice(&args[1..]);
        all
    }

    fn ok(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        ok_with(&self.url, &self.args(args), env)
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        idem_with(&self.url, &self.args(args), env)
    }
}

/// What [`rotation_under_traffic`] leaves for the checks of a store.
struct Rotated {
    /// The records stored before the rotation, with their first answers.
    old: Arc<Vec<(String, Vec<u8>)>>,
    /// `rekey`'s output.
    out: String,
    /// The key of a record sealed under `k3`, which the ring does not hold.
    stranger: String,
}

/// A rotation under traffic: records stored in plaintext and under `k1`, a service that seals
/// under `k2` (still holding `k1`) replaying them and storing new ones from two tasks, and
/// `idem rekey` run meanwhile. No replay fails or differs, nothing runs twice, and afterwards
/// a ring of `k2` alone replays every record: nothing is left under `k1` or in plaintext (the
/// readable key of a formerly plaintext record is gone too), and a second run has nothing to
/// do. A record that opens under no key of the ring is left as it is and named in one error
/// line.
async fn rotation_under_traffic(store: &Arc<dyn Store>, cli: &Cli) -> Rotated {
    let (plain, _) = app(store, None);
    let (before, _) = app(store, Some(ring(&[("k1", 1)])));
    let mut old = Vec::new();
    for i in 0..80 {
        let key = unique(&format!("rekey-{i}"));
        let first = pay(if i % 2 == 0 { &plain } else { &before }, &key).await;
        assert_eq!(first.status, StatusCode::CREATED);
        old.push((key, first.body));
    }
    let old = Arc::new(old);
    // Plaintext records are still there: the ring accepts them until rekey has sealed them.
    let (rotated, runs) = app(
        store,
        Some(ring(&[("k2", 2), ("k1", 1)]).accepting_plaintext()),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..2)
        .map(|task| {
            let (router, old, stop) = (rotated.clone(), old.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut replays, mut fresh) = (0u64, 0u64);
                while !stop.load(Ordering::SeqCst) {
                    let (key, body) = &old[(2 * replays as usize + task) % old.len()];
                    let again = pay(&router, key).await;
                    assert!(
                        again.replayed && again.body == *body,
                        "replay of {key} during rekey: {} {}",
                        again.status,
                        String::from_utf8_lossy(&again.body)
                    );
                    replays += 1;
                    if replays % 4 == 0 {
                        let new = pay(&router, &unique("rekey-new")).await;
                        assert_eq!(new.status, StatusCode::CREATED);
                        fresh += 1;
                    }
                }
                (replays, fresh)
            })
        })
        .collect();
    let keys = format!("{K2},{K1}");
    // Without `--accept-plaintext`, a plaintext record is never sealed (it binds nothing a
    // database writer could not have changed): named, left as it is, exit 1.
    let strict = cli.run(&["rekey", "--dry-run"], &[("IDEM_ENCRYPTION_KEYS", &keys)]);
    assert!(!strict.status.success());
    let line = stderr(&strict);
    assert!(
        line.contains("40 records do not open") && line.contains("plaintext"),
        "{line}"
    );
    let out = tokio::task::block_in_place(|| {
        cli.ok(
            &["rekey", "--batch", "7", "--accept-plaintext"],
            &[("IDEM_ENCRYPTION_KEYS", &keys)],
        )
    });
    stop.store(true, Ordering::SeqCst);
    let (mut replays, mut fresh) = (0, 0);
    for task in load {
        let (r, f) = task.await.unwrap();
        (replays, fresh) = (replays + r, fresh + f);
    }
    assert!(replays > 0 && fresh > 0, "{replays} replays, {fresh} fresh");
    assert_eq!(runs.load(Ordering::SeqCst), fresh, "only the new keys ran");
    assert!(
        out.contains("resealed 80 of ") && out.contains("(40 of them plaintext)"),
        "{out}"
    );

    let (only_k2, runs_k2) = app(store, Some(ring(&[("k2", 2)])));
    for (key, body) in old.iter() {
        let again = pay(&only_k2, key).await;
        assert!(again.replayed, "{key}: {}", again.status);
        assert_eq!(again.body, *body);
    }
    assert_eq!(runs_k2.load(Ordering::SeqCst), 0);
    let was_plain = store.get(&scoped(&old[0].0)).await.unwrap().unwrap();
    // The readable key an encrypting handle writes (`ScopedKey::opaque`), nothing of the
    // client key left.
    assert_eq!(was_plain.key, scoped(&old[0].0).opaque().readable());
    assert!(!was_plain.key.contains("rekey-0"), "{}", was_plain.key);
    let again = cli.ok(&["rekey", "--dry-run"], &[("IDEM_ENCRYPTION_KEYS", K2)]);
    assert!(again.contains("would reseal 0 of "), "{again}");

    // A record under a key the ring does not hold: left as it is, named, exit 1.
    let (other, _) = app(store, Some(ring(&[("k3", 3)])));
    let stranger = unique("rekey-k3");
    let first = pay(&other, &stranger).await;
    let failed = cli.run(&["rekey"], &[("IDEM_ENCRYPTION_KEYS", K2)]);
    assert!(!failed.status.success());
    let line = stderr(&failed);
    assert_eq!(line.lines().count(), 1, "{line}");
    let stranger_hash = scoped(&stranger).hash_hex().to_string();
    assert!(
        line.contains("1 record does not open") && line.contains(&stranger_hash),
        "{line}"
    );
    assert_eq!(pay(&other, &stranger).await.body, first.body);
    Rotated { old, out, stranger }
}

/// [`rotation_under_traffic`] on a SQL store, then `--after` resumes where the run stopped, and
/// `inspect` reads a sealed record with the ring and says plainly that it cannot without.
async fn rekey_under_traffic(db: &Database) {
    let store = db.store().await;
    store.migrate().await.unwrap();
    let cli = Cli {
        url: db.url.clone(),
        prefix: None,
    };
    let Rotated { old, out, stranger } = rotation_under_traffic(&store, &cli).await;
    // The ring holds `k3` from here on: the stranger opens.
    let k2_k3 = format!("{K2},{K3}");
    let again = cli.ok(&["rekey", "--dry-run"], &[("IDEM_ENCRYPTION_KEYS", &k2_k3)]);
    // Resumed after the last key hash the first run reached: nothing after it.
    let last = out
        .lines()
        .rev()
        .find_map(|l| l.split("up to key hash ").nth(1))
        .expect("a line per batch");
    let resumed = ok_with(
        &db.url,
        &["rekey", "--dry-run", "--after", last],
        &[("IDEM_ENCRYPTION_KEYS", &k2_k3)],
    );
    let scanned = |out: &str| -> u64 {
        let of = out.split(" of ").nth(1).expect("a summary");
        of.split(' ').next().unwrap().parse().unwrap()
    };
    assert!(scanned(&resumed) < scanned(&again) / 4, "{resumed}");

    let hash = scoped(&old[1].0).hash_hex().to_string();
    let without = ok_with(&db.url, &["inspect", "--key-hash", &hash, "--body"], &[]);
    assert_eq!(field(&without, "sealed under"), "key `k2`");
    assert!(
        field(&without, "unreadable").contains("IDEM_ENCRYPTION_KEYS"),
        "{without}"
    );
    assert!(!without.contains("cus_secret_42"), "{without}");
    let with = ok_with(
        &db.url,
        &["inspect", "--key-hash", &hash, "--body"],
        &[("IDEM_ENCRYPTION_KEYS", K2)],
    );
    assert!(with.contains("cus_secret_42"), "{with}");
    assert!(
        field(&with, "business no").starts_with("pay_secret_"),
        "{with}"
    );

    let stranger_hash = scoped(&stranger).hash_hex().to_string();
    let json = ok_with(
        &db.url,
        &["inspect", "--key-hash", &stranger_hash, "--json"],
        &[("IDEM_ENCRYPTION_KEYS", K2)],
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["sealed_under"], "k3");
    assert!(json["unopened"].as_str().unwrap().contains("k3"), "{json}");
    assert_eq!(json["biz_no"], serde_json::Value::Null);
    let with_k3 = ok_with(
        &db.url,
        &["inspect", "--key-hash", &stranger_hash, "--json", "--body"],
        &[("IDEM_ENCRYPTION_KEYS", &format!("{K2},{K3}"))],
    );
    let with_k3: serde_json::Value = serde_json::from_str(&with_k3).unwrap();
    assert_eq!(with_k3["unopened"], serde_json::Value::Null);
    assert!(with_k3["body"].as_str().unwrap().contains("cus_secret_42"));

    // Switching encryption off: `--unseal` opens every record back to plaintext with the
    // ring's keys, after which a handle without any ring replays them all.
    let unsealed = cli.ok(&["rekey", "--unseal"], &[("IDEM_ENCRYPTION_KEYS", &k2_k3)]);
    assert!(
        unsealed.contains("opened ") && unsealed.contains("back to plaintext"),
        "{unsealed}"
    );
    // The business number comes back with the response.
    let opened = ok_with(&db.url, &["inspect", "--key-hash", &hash], &[]);
    assert!(
        field(&opened, "business no").starts_with("pay_secret_"),
        "{opened}"
    );
    let (plain, runs) = app(&store, None);
    for (key, body) in old.iter() {
        let again = pay(&plain, key).await;
        assert!(again.replayed, "{key}: {}", again.status);
        assert_eq!(again.body, *body);
    }
    assert!(pay(&plain, &stranger).await.replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let again = cli.ok(
        &["rekey", "--unseal", "--dry-run"],
        &[("IDEM_ENCRYPTION_KEYS", K2)],
    );
    assert!(again.contains("would open 0 of "), "{again}");
}

backend_tests!(
    2,
    on_database,
    [sqlite, postgres, mysql],
    rekey_under_traffic,
);

/// [`rotation_under_traffic`] on Redis: every record found by `SCAN` and rewritten by a script
/// guarded by its `rev`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekey_under_traffic_on_redis() {
    let Some(url) = Backend::Redis.url() else {
        return;
    };
    on_redis(&url).await;
}

/// The same on a Redis Cluster: `SCAN` on each primary, each rewrite on its slot's primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekey_under_traffic_on_a_redis_cluster() {
    let Ok(url) = std::env::var("IDEM_TEST_REDIS_CLUSTER_URL") else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "IDEM_TEST_REDIS_CLUSTER_URL is not set (scripts/test sets it)"
        );
        return;
    };
    on_redis(&url).await;
}

async fn on_redis(url: &str) {
    let prefix = format!("{}:", unique("rekey"));
    let store: Arc<dyn Store> =
        Arc::new(RedisStore::connect(url).await.unwrap().with_prefix(&prefix));
    let cli = Cli {
        url: url.to_owned(),
        prefix: Some(prefix),
    };
    rotation_under_traffic(&store, &cli).await;
    // `stats` takes no `--redis-prefix`: it reads SQL only.
    let sql_only = idem_with(url, &["stats"], &[]);
    assert!(
        stderr(&sql_only).contains("SQL stores only"),
        "{}",
        stderr(&sql_only)
    );
}
