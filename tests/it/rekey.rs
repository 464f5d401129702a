//! Key rotation with `idem rekey` (`src/bin/idem.rs`) while a service serves the records it
//! rewrites, and `idem inspect` with and without the key ring, on every SQL store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;

use crate::backends::{Database, backend_tests, on_database};
use crate::cli::{field, idem_with, ok_with, stderr};
use crate::encryption::{app, pay, ring, scoped};
use crate::servers::unique;

/// The keys of `ring(&[("k1", 1)])` .. `("k3", 3)` as `IDEM_ENCRYPTION_KEYS` writes them.
const K1: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const K2: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
const K3: &str = "k3:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=";

/// A rotation under traffic: records stored in plaintext and under `k1`, a service that seals
/// under `k2` (still holding `k1`) replaying them and storing new ones from two tasks, and
/// `idem rekey` run meanwhile. No replay fails or differs, nothing runs twice, and afterwards
/// a ring of `k2` alone replays every record: nothing is left under `k1` or in plaintext (the
/// readable key of a formerly plaintext record is gone too). `inspect` reads a sealed record
/// with the ring and says plainly that it cannot without; a record that opens under no key of
/// the ring is left as it is and named in one error line.
async fn rekey_under_traffic(db: &Database) {
    let store = db.store().await;
    store.migrate().await.unwrap();
    let (plain, _) = app(&store, None);
    let (before, _) = app(&store, Some(ring(&[("k1", 1)])));
    let mut old = Vec::new();
    for i in 0..80 {
        let key = unique(&format!("rekey-{i}"));
        let first = pay(if i % 2 == 0 { &plain } else { &before }, &key).await;
        assert_eq!(first.status, StatusCode::CREATED);
        old.push((key, first.body));
    }
    let old = Arc::new(old);
    let (rotated, runs) = app(&store, Some(ring(&[("k2", 2), ("k1", 1)])));
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
    let url = db.url.clone();
    let keys = format!("{K2},{K1}");
    let out = tokio::task::spawn_blocking(move || {
        ok_with(
            &url,
            &["rekey", "--batch", "7"],
            &[("IDEM_ENCRYPTION_KEYS", &keys)],
        )
    })
    .await
    .unwrap();
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

    let (only_k2, runs_k2) = app(&store, Some(ring(&[("k2", 2)])));
    for (key, body) in old.iter() {
        let again = pay(&only_k2, key).await;
        assert!(again.replayed, "{key}: {}", again.status);
        assert_eq!(again.body, *body);
    }
    assert_eq!(runs_k2.load(Ordering::SeqCst), 0);
    let was_plain = store.get(&scoped(&old[0].0)).await.unwrap().unwrap();
    assert!(
        was_plain.key.starts_with("POST /payments:sealed:") && !was_plain.key.contains("rekey-0"),
        "{}",
        was_plain.key
    );
    let again = ok_with(
        &db.url,
        &["rekey", "--dry-run"],
        &[("IDEM_ENCRYPTION_KEYS", K2)],
    );
    assert!(again.contains("would reseal 0 of "), "{again}");
    // Resumed after the last key hash the first run reached: nothing after it.
    let last = out
        .lines()
        .rev()
        .find_map(|l| l.split("up to key hash ").nth(1))
        .expect("a line per batch");
    let resumed = ok_with(
        &db.url,
        &["rekey", "--dry-run", "--after", last],
        &[("IDEM_ENCRYPTION_KEYS", K2)],
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

    // A record under a key the ring does not hold: left as it is, named, exit 1.
    let (other, _) = app(&store, Some(ring(&[("k3", 3)])));
    let stranger = unique("rekey-k3");
    let first = pay(&other, &stranger).await;
    let failed = idem_with(&db.url, &["rekey"], &[("IDEM_ENCRYPTION_KEYS", K2)]);
    assert!(!failed.status.success());
    let line = stderr(&failed);
    assert_eq!(line.lines().count(), 1, "{line}");
    let stranger_hash = scoped(&stranger).hash_hex().to_string();
    assert!(
        line.contains("1 records do not open") && line.contains(&stranger_hash),
        "{line}"
    );
    assert_eq!(pay(&other, &stranger).await.body, first.body);
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
}

backend_tests!(
    2,
    on_database,
    [sqlite, postgres, mysql],
    rekey_under_traffic,
);
