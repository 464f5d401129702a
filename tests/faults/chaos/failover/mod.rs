//! Item 6, failover under load: the store's primary dies with `SIGKILL` while clients send
//! payments (some of them hanging up mid-request), its replica is promoted, and the service
//! carries on without a restart.
//!
//! - PostgreSQL: a primary with a streaming standby (servers of the test's own, started by
//!   `scripts/db.sh` with PostgreSQL's durable defaults), two processes of `examples/payments`
//!   behind a TCP proxy that stands for the virtual IP (or PgBouncer) in front of them; the
//!   primary is killed, the standby promoted, the proxy pointed at it.
//! - MariaDB Galera: three processes, one per node of a multi-primary cluster; a node is
//!   killed and restarts, or is split off and let back ([`galera`]).
//! - Redis Cluster: a cluster of the test's own (3 masters, 1 replica each), an in-process
//!   `#[idempotent]` axum handler on a real socket whose effect is a ledger outside Redis (a
//!   payment processor's, which no failover rolls back); a master is killed, the cluster
//!   promotes its replica, the killed node comes back as a replica of it.
//!
//! The replication link runs through a [`proxy::Proxy`]: it stalls for [`LAG`] before the kill
//! and is cut with the kill, so that the replica is that far behind when the primary dies, as a
//! busy or distant replica is. On loopback a replica otherwise holds every write within a
//! millisecond, and a kill alone loses nothing, which would hide the trade the durable
//! settings make.
//!
//! With durable acknowledgement (`synchronous_standby_names`; `WAIT 1`) every key must have one
//! payment under one operation id, every answer of one key the same payment, no answer a
//! `500`, every `503` a `Retry-After`. Without it (the defaults) the test measures instead:
//! how many keys lost their record in the failover, and how many operations ran twice, under
//! two operation ids. Each run prints its figures (`[chaos] failover ...`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{self, Cut, Failure};
use super::fleet::{Database, Fleet};
use super::report;
use super::rng::Rng;

mod galera;
mod postgres;
mod proxy;
mod redis;

pub use galera::{Fault, galera};
pub use postgres::postgres;
pub use redis::redis_cluster;

/// Each client pauses this long between two payments: at most 160 new keys a second, so that
/// a run stays short on a fast store and its figures compare across stores.
const PACE: Duration = Duration::from_millis(100);
/// The size of a run, from the chaos knobs: half of `IDEM_CHAOS_CLIENTS` (16 in the short
/// form), and a fifth of `IDEM_CHAOS_SECONDS` (at least 1.5 s) of load before the kill and
/// again after recovery.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    clients: usize,
    before_kill: Duration,
    after_recovery: Duration,
}

impl Shape {
    pub fn of(knobs: &super::Knobs) -> Shape {
        let phase = Duration::from_millis((knobs.seconds * 200).max(1500));
        Shape {
            clients: (knobs.clients / 2).max(1),
            before_kill: phase,
            after_recovery: phase,
        }
    }
}

/// The replica falls this far behind just before the primary dies (its link stalls): what the
/// primary acknowledged meanwhile is on the primary alone.
const LAG: Duration = Duration::from_millis(300);
/// One client's attempt gives up after this long.
const ATTEMPT: Duration = Duration::from_secs(10);
/// Every key must be answered by then.
const DEADLINE: Duration = Duration::from_secs(90);
/// The share of attempts whose client hangs up mid-request.
const HANG_UPS: f64 = 0.1;

/// `scripts/db.sh` with `args`, in a drop: errors ignored.
fn db_quiet(args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db.sh");
    let _ = Command::new(script).args(args).output();
}

/// `scripts/db.sh` with `args`: its output, or a panic with its errors.
fn db(args: &[&str], env: &[(&str, &str)]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db.sh");
    let out = Command::new(&script)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "scripts/db.sh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `true` when `program` runs; when it does not, a note, or a failure with `CI=true` (where
/// `scripts/test` installs every server).
fn installed(program: &str) -> bool {
    let found = Command::new(program).arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{program} not found; CI=true requires it (apt-get install redis-server)"
        );
        report(&format!("{program} not found: skipped"));
    }
    found
}

/// A directory for servers of the test's own, readable by the `postgres` user.
fn server_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

// ---------------------------------------------------------------- the load

/// What the clients saw.
#[derive(Default)]
struct Seen {
    /// Per key, every payment id answered.
    payments: Mutex<BTreeMap<usize, Vec<String>>>,
    created: AtomicU64,
    replayed: AtomicU64,
    unavailable: AtomicU64,
    /// `503`s without `Retry-After`.
    unavailable_bare: AtomicU64,
    /// The longest a `503` took to come, in ms.
    slowest_unavailable_ms: AtomicU64,
    in_progress: AtomicU64,
    /// Other answers (a `500` among them), with their key.
    wrong: Mutex<Vec<String>>,
    broken: AtomicU64,
    hung_up: AtomicU64,
    /// Keys still unanswered at the deadline.
    unfinished: Mutex<Vec<usize>>,
}

/// Where the load goes, and what one key's request is.
struct Target {
    addrs: Vec<SocketAddr>,
    path: &'static str,
    tag: String,
}

impl Target {
    fn key(&self, i: usize) -> String {
        format!("fo-{i}-{}", self.tag)
    }

    fn order(&self, i: usize) -> String {
        format!("ord-{i}-{}", self.tag)
    }

    fn request(&self, i: usize) -> Vec<u8> {
        let body = json!({
            "amount": format!("{}.00", 10 + i % 90),
            "currency": "EUR",
            "customer_id": "cus_failover",
            "order_id": self.order(i),
        })
        .to_string();
        client::request(
            "POST",
            self.path,
            &[("Idempotency-Key", &self.key(i))],
            Some(&body),
        )
    }
}

/// Sends key `i` until it is answered `201` (or the deadline passes), retrying as a client
/// does: after a `503` or `409` its `Retry-After` (at most a second), after a broken
/// connection at once; with `hang_ups`, some attempts hang up mid-request and retry.
async fn pay(target: &Target, i: usize, seen: &Seen, rng: &mut Rng, hang_ups: f64, end: Instant) {
    let raw = target.request(i);
    loop {
        if Instant::now() > end {
            seen.unfinished.lock().unwrap().push(i);
            return;
        }
        let addr = target.addrs[rng.below(target.addrs.len() as u64) as usize];
        if rng.chance(hang_ups) {
            let cut = Cut::After(rng.between(0, 60));
            if client::hang_up(addr, &raw, cut, ATTEMPT).await.is_ok() {
                seen.hung_up.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let started = Instant::now();
        let r = match client::exchange(addr, &raw, ATTEMPT).await {
            Ok(r) => r,
            Err(Failure::Connect(_) | Failure::Broken(_) | Failure::Timeout) => {
                seen.broken.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match r.status {
            201 => {
                let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
                let id = body["payment_id"].as_str().unwrap_or_default().to_owned();
                let counter = if r.replayed() {
                    &seen.replayed
                } else {
                    &seen.created
                };
                counter.fetch_add(1, Ordering::Relaxed);
                seen.payments.lock().unwrap().entry(i).or_default().push(id);
                return;
            }
            503 | 409 => {
                let counter = if r.status == 503 {
                    let ms = started.elapsed().as_millis() as u64;
                    seen.slowest_unavailable_ms.fetch_max(ms, Ordering::Relaxed);
                    &seen.unavailable
                } else {
                    &seen.in_progress
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let wait = match r.retry_after() {
                    Some(s) => Duration::from_secs(s).min(Duration::from_secs(1)),
                    None => {
                        seen.unavailable_bare.fetch_add(1, Ordering::Relaxed);
                        Duration::from_millis(200)
                    }
                };
                tokio::time::sleep(wait).await;
            }
            status => {
                seen.wrong.lock().unwrap().push(format!(
                    "{}: {status} {}",
                    target.key(i),
                    r.text()
                ));
                return;
            }
        }
    }
}

/// `processes` processes of the payments example on `database`, each request's handler 20 ms
/// long, the store's statements bounded at 2 s.
async fn payments_fleet(database: &Database, processes: usize) -> Fleet {
    let env = [
        ("PAYMENTS_DELAY_MS", "20".to_owned()),
        ("PAYMENTS_STORE_TIMEOUT_MS", "2000".to_owned()),
    ];
    Fleet::start(database, processes, &env).await
}

/// How many keys answered with a payment have no record in `database` ([`lost_records`]).
async fn lost_in(database: &Database, sending: &Sending) -> usize {
    let records: BTreeSet<String> = database
        .records()
        .await
        .into_iter()
        .map(|r| r.client_key)
        .collect();
    lost_records(&sending.seen, |i| {
        let held = records.contains(&sending.target.key(i));
        async move { held }
    })
    .await
}

/// The payments `database` holds, per key of the run (of `keys` sent): payment and operation ids.
async fn effects_in(
    database: &Database,
    keys: usize,
    target: &Target,
) -> BTreeMap<usize, BTreeSet<(String, String)>> {
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
    effects
}

/// A run's load: `shape.clients` clients sending new keys to `target` until [`Sending::stop`],
/// and what they saw.
struct Sending {
    target: Arc<Target>,
    seen: Arc<Seen>,
    seed: u64,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Sending {
    /// Draws the run's seed, reports it for `name`, and starts the clients.
    fn start(name: &str, target: Target, shape: &Shape) -> Sending {
        let seed = super::rng::seed();
        report(&format!("failover {name}: seed {seed}, {shape:?}"));
        let (target, seen) = (Arc::new(target), Arc::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(load(
            target.clone(),
            seen.clone(),
            stop.clone(),
            shape.clients,
            seed,
        ));
        Sending {
            target,
            seen,
            seed,
            stop,
            task,
        }
    }

    /// Stops the clients: the number of keys they sent.
    async fn stop(&mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        (&mut self.task).await.unwrap()
    }

    /// Every one of the `keys` sent once more ([`resend_all`]).
    async fn resend_all(&self, keys: usize, clients: usize) {
        let (target, seen) = (self.target.clone(), self.seen.clone());
        resend_all(target, seen, keys, clients, self.seed ^ 1).await;
    }
}

/// Clients sending new keys until `stop`; answers the number of keys sent.
async fn load(
    target: Arc<Target>,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
    clients: usize,
    seed: u64,
) -> usize {
    let next = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + DEADLINE;
    let mut rng = Rng::new(seed);
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (target, seen, stop, next) =
                (target.clone(), seen.clone(), stop.clone(), next.clone());
            let mut rng = rng.fork();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    pay(&target, i, &seen, &mut rng, HANG_UPS, end).await;
                    tokio::time::sleep(PACE).await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    next.load(Ordering::Relaxed)
}

/// Every key once more, as a client whose answer was lost sends it again: the answer must be
/// the replay of the key's payment.
async fn resend_all(target: Arc<Target>, seen: Arc<Seen>, keys: usize, clients: usize, seed: u64) {
    let next = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + DEADLINE;
    let mut rng = Rng::new(seed);
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (target, seen, next) = (target.clone(), seen.clone(), next.clone());
            let mut rng = rng.fork();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= keys {
                        return;
                    }
                    pay(&target, i, &seen, &mut rng, 0.0, end).await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
}

/// The figures of a run, and its violations of the promise.
struct Verdict {
    /// Keys answered with two different payments: the operation ran twice.
    twice: usize,
    lines: Vec<String>,
}

/// The keys answered so far whose record `holds` does not find after the failover: claims or
/// completions the failover lost.
async fn lost_records<F: Future<Output = bool>>(seen: &Seen, holds: impl Fn(usize) -> F) -> usize {
    let answered: Vec<usize> = seen.payments.lock().unwrap().keys().copied().collect();
    let mut lost = 0;
    for i in answered {
        if !holds(i).await {
            lost += 1;
        }
    }
    lost
}

/// Compares what the clients saw with the effects (`effects`: per key, the payments made for
/// it and their operation ids); `lost` is [`lost_records`]'s count.
fn judge(
    name: &str,
    keys: usize,
    seen: &Seen,
    effects: &BTreeMap<usize, BTreeSet<(String, String)>>,
    lost: usize,
) -> Verdict {
    let payments = seen.payments.lock().unwrap();
    let mut lines = Vec::new();
    let mut twice = 0;
    if lost > 0 {
        lines.push(format!("{lost} answered keys lost their record"));
    }
    for i in 0..keys {
        let answered: BTreeSet<&String> = payments.get(&i).into_iter().flatten().collect();
        let made = effects.get(&i).cloned().unwrap_or_default();
        let ops: BTreeSet<&String> = made.iter().map(|(_, op)| op).collect();
        if answered.len() > 1 || ops.len() > 1 {
            twice += 1;
            lines.push(format!(
                "key {i}: answered {answered:?}, ran under operations {ops:?}"
            ));
        }
        for id in &answered {
            if !made.iter().any(|(p, _)| p == *id) {
                lines.push(format!(
                    "key {i}: answered {id}, which the store does not hold"
                ));
            }
        }
    }
    let wrong = seen.wrong.lock().unwrap();
    let unfinished = seen.unfinished.lock().unwrap();
    report(&format!(
        "failover {name}: {keys} keys, {} created, {} replayed, {} in progress, {} unavailable \
         (slowest {} ms, {} without Retry-After), {} broken, {} hung up; lost records {lost}, \
         ran twice {twice}, other answers {}, unfinished {}",
        seen.created.load(Ordering::Relaxed),
        seen.replayed.load(Ordering::Relaxed),
        seen.in_progress.load(Ordering::Relaxed),
        seen.unavailable.load(Ordering::Relaxed),
        seen.slowest_unavailable_ms.load(Ordering::Relaxed),
        seen.unavailable_bare.load(Ordering::Relaxed),
        seen.broken.load(Ordering::Relaxed),
        seen.hung_up.load(Ordering::Relaxed),
        wrong.len(),
        unfinished.len(),
    ));
    lines.extend(wrong.iter().cloned());
    lines.extend(
        unfinished
            .iter()
            .map(|i| format!("key {i}: never answered")),
    );
    if seen.unavailable_bare.load(Ordering::Relaxed) > 0 {
        lines.push("a 503 without Retry-After".to_owned());
    }
    Verdict { twice, lines }
}

/// The durable run: nothing may have gone wrong.
fn assert_kept(name: &str, verdict: &Verdict) {
    assert!(
        verdict.lines.is_empty(),
        "failover {name}: the promise broke:\n{}",
        verdict.lines.join("\n")
    );
}
