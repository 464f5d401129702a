//! Application clocks that disagree by minutes, as a real fault: the test re-executes this
//! binary for itself as a child process whose clock libfaketime moves 10 minutes ahead (then
//! behind), both talking to one PostgreSQL, MariaDB or Redis server. The SQL stores decide by
//! the database's clock and the Redis store by the Redis server's `TIME`, so neither process may
//! take over the other's live lease, see the other's records expire early, or purge records the
//! server does not consider expired.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_runtime::key::ScopedKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Outcome, RecordState, Store};

use crate::support::*;

/// Where Debian's `faketime` package puts the library (`IDEM_LIBFAKETIME` overrides it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

const LIVE_LEASE: Duration = Duration::from_secs(60);
/// Shorter than the skew: a clock 10 minutes ahead would see these records as expired.
const SHORT_TTL: Duration = Duration::from_secs(240);

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The keys of one run, named by the parent and passed to the child.
fn key(run: &str, name: &str) -> ScopedKey {
    ScopedKey::new(&["skew", run], "POST /skew", name).unwrap()
}

const SHORT_KEYS: usize = 5;

/// The child's half: runs with its clock shifted by `FAKETIME`, checks what it sees, exits
/// non-zero (a failed assertion) when the application's clock decided anything.
async fn child(store: &dyn Store, run: &str, role: &str) {
    println!("IDEM_SKEW_NOW={}", wall_ms());
    let h = hash("a");
    // The parent's live lease: still live by the server's clock, whatever ours says.
    match store
        .claim(&ClaimRequest::new(&key(run, "live"), h, LIVE_LEASE, TTL))
        .await
        .unwrap()
    {
        Claim::InProgress { retry_after, .. } => {
            assert!(
                retry_after > Duration::ZERO && retry_after <= LIVE_LEASE,
                "{retry_after:?}"
            )
        }
        other => panic!("{role}: took the parent's live lease: {other:?}"),
    }
    // The parent's records with a TTL shorter than the skew are alive.
    for i in 0..SHORT_KEYS {
        let k = key(run, &format!("short-{i}"));
        let rec = store.get(&k).await.unwrap();
        assert!(rec.is_some(), "{role}: short-{i} seen expired early");
        match store.claim(&req(&k, h)).await.unwrap() {
            Claim::Completed(rec) => assert_eq!(rec.body, b"parent"),
            other => panic!("{role}: short-{i} not replayed: {other:?}"),
        }
    }
    if role == "ahead" {
        // A purge from the clock that runs ahead deletes nothing the server keeps.
        while store.purge_expired(1000).await.unwrap() > 0 {}
    }
    // A record of the child's own, for the parent to look at.
    let mine = key(run, role);
    let Claim::Acquired(lease) = store
        .claim(&ClaimRequest::new(&mine, h, LIVE_LEASE, SHORT_TTL))
        .await
        .unwrap()
    else {
        panic!("{role}: its own fresh key was not free")
    };
    if role == "behind" {
        let done = Completion::new(Outcome::Completed, 200, b"child".to_vec());
        store.complete(&lease, &done).await.unwrap();
    }
    println!("IDEM_SKEW_CHILD_OK");
}

/// Runs this test again as a child process with its clock shifted by `faketime` (`+10m`,
/// `-10m`); returns the child's wall-clock time as it printed it.
async fn spawn_child(test: &str, run: &str, role: &str, faketime: &str, lib: &str) -> i64 {
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("IDEM_SKEW_CHILD", format!("{run}/{role}"))
        .env("LD_PRELOAD", lib)
        .env("FAKETIME", faketime)
        // tokio's timers and the pool's timeouts run on the monotonic clock: keep it real.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("IDEM_SKEW_CHILD_OK"),
        "the {role} child failed:\n{stdout}\n{stderr}"
    );
    stdout
        .split("IDEM_SKEW_NOW=")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .and_then(|ms| ms.trim().parse().ok())
        .unwrap_or_else(|| panic!("the {role} child printed no time: {stdout}"))
}

/// The path of libfaketime, or `None` (with a note) when it is not installed; under `CI=true` a
/// missing library is a failure.
fn libfaketime() -> Option<String> {
    let lib = std::env::var("IDEM_LIBFAKETIME").unwrap_or_else(|_| LIBFAKETIME.to_owned());
    if std::path::Path::new(&lib).exists() {
        return Some(lib);
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "{lib} is missing and CI=true: install Debian's `faketime` package (scripts/test does)"
    );
    eprintln!("note: {lib} is missing (apt-get install faketime): skipping the clock-skew test");
    None
}

async fn skew_between_processes(test: &str, store: Arc<dyn Store>) {
    if let Ok(spec) = std::env::var("IDEM_SKEW_CHILD") {
        let (run, role) = spec.split_once('/').unwrap();
        return child(&*store, run, role).await;
    }
    let Some(lib) = libfaketime() else { return };
    let run = format!("{}-{}", std::process::id(), wall_ms());
    let h = hash("a");
    let live = match store
        .claim(&ClaimRequest::new(&key(&run, "live"), h, LIVE_LEASE, TTL))
        .await
        .unwrap()
    {
        Claim::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    for i in 0..SHORT_KEYS {
        let k = key(&run, &format!("short-{i}"));
        let Claim::Acquired(lease) = store
            .claim(&ClaimRequest::new(
                &k,
                h,
                Duration::from_secs(30),
                SHORT_TTL,
            ))
            .await
            .unwrap()
        else {
            panic!("short-{i} not free")
        };
        let done = Completion::new(Outcome::Completed, 200, b"parent".to_vec());
        store.complete(&lease, &done).await.unwrap();
    }

    for (role, faketime, sign) in [("ahead", "+10m", 1), ("behind", "-10m", -1)] {
        let before = wall_ms();
        let child_now = spawn_child(test, &run, role, faketime, &lib).await;
        // The fake clock really reached the child.
        assert!(
            sign * (child_now - before) >= 9 * 60_000,
            "the {role} child's clock is not shifted by {faketime}: {child_now} vs {before}"
        );
        // Its lease is live by the server's clock, not 10 minutes longer or shorter.
        match store
            .claim(&ClaimRequest::new(
                &key(&run, role),
                h,
                LIVE_LEASE,
                SHORT_TTL,
            ))
            .await
            .unwrap()
        {
            Claim::InProgress { retry_after, .. } if role == "ahead" => {
                assert!(
                    retry_after <= LIVE_LEASE,
                    "{role}: lease ends in {retry_after:?}"
                )
            }
            Claim::Completed(rec) if role == "behind" => assert_eq!(rec.body, b"child"),
            other => panic!("the {role} child's record seen as {other:?}"),
        }
        let rec = store.get(&key(&run, role)).await.unwrap();
        assert!(
            rec.is_some(),
            "the {role} child's record seen expired early"
        );
    }

    // Nothing the server keeps was purged by the process whose clock runs ahead, and the live
    // lease was never taken over.
    for i in 0..SHORT_KEYS {
        let rec = store.get(&key(&run, &format!("short-{i}"))).await.unwrap();
        assert_eq!(
            rec.map(|r| r.state),
            Some(RecordState::Completed),
            "short-{i}"
        );
    }
    let done = Completion::new(Outcome::Completed, 200, b"live".to_vec());
    store.complete(&live, &done).await.unwrap();
    assert_eq!(
        store.get(&key(&run, "live")).await.unwrap().unwrap().fence,
        live.fence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_clock_skew_between_processes() {
    let Some(store) = postgres_store().await else {
        return;
    };
    skew_between_processes(
        "skew::postgres_clock_skew_between_processes",
        Arc::new(store),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_clock_skew_between_processes() {
    let Some(store) = mysql_store().await else {
        return;
    };
    skew_between_processes("skew::mysql_clock_skew_between_processes", Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_clock_skew_between_processes() {
    let Some(url) = server_url("IDEM_TEST_REDIS_URL") else {
        return;
    };
    // Parent and child share one key prefix (their keys are the run's own).
    let store = idem_runtime::store::redis::RedisStore::connect(&url)
        .await
        .unwrap()
        .with_prefix("idem-test:skew:");
    store.migrate().await.unwrap();
    skew_between_processes("skew::redis_clock_skew_between_processes", Arc::new(store)).await;
}
