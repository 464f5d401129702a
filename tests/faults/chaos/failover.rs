//! Item 6, failover under load: the store's primary dies with `SIGKILL` while clients send
//! payments (some of them hanging up mid-request), its replica is promoted, and the service
//! carries on without a restart.
//!
//! - PostgreSQL: a primary with a streaming standby (servers of the test's own, started by
//!   `scripts/db.sh` with PostgreSQL's durable defaults), two processes of `examples/payments`
//!   behind a TCP proxy that stands for the virtual IP (or PgBouncer) in front of them; the
//!   primary is killed, the standby promoted, the proxy pointed at it.
//! - Redis Cluster: a cluster of the test's own (3 masters, 1 replica each), an in-process
//!   `#[idempotent]` axum handler on a real socket whose effect is a ledger outside Redis (a
//!   payment processor's, which no failover rolls back); a master is killed, the cluster
//!   promotes its replica, the killed node comes back as a replica of it.
//!
//! The replication link runs through a [`Proxy`]: it stalls for [`LAG`] before the kill and is
//! cut with the kill, so that the replica is that far behind when the primary dies, as a busy
//! or distant replica is. On loopback a replica otherwise holds every write within a
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
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

use super::client::{self, Cut, Failure};
use super::fleet::{Backend, Database, Fleet};
use super::report;
use super::rng::{Rng, seed};

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

// ---------------------------------------------------------------- the proxy

/// A TCP proxy: in front of a service it stands for a virtual IP ([`switch`](Self::switch)
/// points it at another server and cuts every connection to the old one, as a moved address
/// does); on a replication link it is the network between primary and replica, which can
/// [`stall`](Self::stall) (nothing forwarded, every connection left open) and be
/// [`cut`](Self::cut) (every connection dropped with the bytes in flight, as when the
/// primary's machine dies).
///
/// With a `marker`, only the connections whose client sent it stall (on a Redis master, the
/// replica's link, which sends `PSYNC`; its clients share the address and never do).
struct Proxy {
    addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    stalled: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        Self::start_marking(target, None).await
    }

    async fn start_marking(target: SocketAddr, marker: Option<&'static [u8]>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target = Arc::new(Mutex::new(target));
        let stalled = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let (to, flag, conns) = (target.clone(), stalled.clone(), live.clone());
        tokio::spawn(async move {
            while let Ok((downstream, _)) = listener.accept().await {
                let upstream = *to.lock().unwrap();
                let link = Link {
                    stalled: flag.clone(),
                    marker,
                    marked: Arc::new(AtomicBool::new(marker.is_none())),
                };
                let relay = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = downstream.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, link.clone(), true), pipe(sr, cw, link, false));
                });
                let mut conns = conns.lock().unwrap();
                conns.retain(|c| !c.is_finished());
                conns.push(relay);
            }
        });
        Proxy {
            addr,
            target,
            stalled,
            live,
        }
    }

    fn stall(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::SeqCst);
    }

    fn cut(&self) {
        for relay in self.live.lock().unwrap().drain(..) {
            relay.abort();
        }
    }

    fn switch(&self, to: SocketAddr) {
        *self.target.lock().unwrap() = to;
        self.cut();
    }
}

/// One connection through a [`Proxy`]: whether it stalls with the proxy.
#[derive(Clone)]
struct Link {
    stalled: Arc<AtomicBool>,
    marker: Option<&'static [u8]>,
    /// The client sent the marker (always, without one).
    marked: Arc<AtomicBool>,
}

/// Forwards `from` to `to` (`upstream`: from the client), holding what it read while the link
/// stalls.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    link: Link,
    upstream: bool,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let (true, Some(marker)) = (upstream, link.marker)
            && buf[..n].windows(marker.len()).any(|w| w == marker)
        {
            link.marked.store(true, Ordering::SeqCst);
        }
        while link.stalled.load(Ordering::SeqCst) && link.marked.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
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

// ---------------------------------------------------------------- PostgreSQL

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
            let _ = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db.sh"))
                .args(["pg-stop", &path(self.dir.path(), server)])
                .output();
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
    let fleet = Fleet::start(
        &database,
        2,
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
        tag: crate::servers::unique("pg"),
    });
    let (seen, stop) = (Arc::new(Seen::default()), Arc::new(AtomicBool::new(false)));
    let set_up = began.elapsed();
    let sending = tokio::spawn(load(
        target.clone(),
        seen.clone(),
        stop.clone(),
        shape.clients,
        seed,
    ));

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
    stop.store(true, Ordering::Relaxed);
    let keys = sending.await.unwrap();
    let promoted = Database::at(Backend::Postgres, pair.url(pair.standby, "app", "appdb"));
    let records: BTreeSet<String> = promoted
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
    let loaded = began.elapsed();
    resend_all(target.clone(), seen.clone(), keys, shape.clients, seed ^ 1).await;
    report(&format!(
        "failover {name}: set up in {} ms, load until {} ms, resent until {} ms",
        set_up.as_millis(),
        loaded.as_millis(),
        began.elapsed().as_millis()
    ));
    fleet.assert_alive();

    // The payments the promoted standby holds.
    let index = |order: &str| (0..keys).find(|&i| target.order(i) == order);
    let mut effects: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    for p in promoted.payments().await {
        if let Some(i) = index(&p.order_id) {
            effects
                .entry(i)
                .or_default()
                .insert((p.payment_id, p.operation_id));
        }
    }
    let verdict = judge(name, keys, &seen, &effects, lost);
    if synchronous {
        assert_kept(name, &verdict);
    } else {
        assert!(
            seen.unfinished.lock().unwrap().is_empty(),
            "the service did not resume"
        );
    }
    Some(verdict.twice)
}

// ---------------------------------------------------------------- Redis Cluster

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
        let _ = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db.sh"))
            .args(["redis-cluster-stop", &path(self.dir.path(), "cluster")])
            .output();
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
    use idem::http::Json;
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

    let seed = seed();
    report(&format!("failover {name}: seed {seed}, {shape:?}"));
    let target = Arc::new(Target {
        addrs: vec![addr],
        path: "/payments",
        tag: crate::servers::unique("rc"),
    });
    let (seen, stop) = (Arc::new(Seen::default()), Arc::new(AtomicBool::new(false)));
    let set_up = began.elapsed();
    let sending = tokio::spawn(load(
        target.clone(),
        seen.clone(),
        stop.clone(),
        shape.clients,
        seed,
    ));

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
    stop.store(true, Ordering::Relaxed);
    let keys = sending.await.unwrap();
    let lost = lost_records(&seen, |i| {
        let (store, key) = (store.clone(), target.key(i));
        async move {
            let key = idem::key::ScopedKey::new::<&str>(&[], "POST /payments", &key).unwrap();
            store.get(&key).await.unwrap().is_some()
        }
    })
    .await;
    let loaded = began.elapsed();
    resend_all(target.clone(), seen.clone(), keys, shape.clients, seed ^ 1).await;
    report(&format!(
        "failover {name}: set up in {} ms, load until {} ms, resent until {} ms",
        set_up.as_millis(),
        loaded.as_millis(),
        began.elapsed().as_millis()
    ));
    server.abort();

    let index = |order: &str| (0..keys).find(|&i| target.order(i) == order);
    let effects = ledger
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(order, made)| Some((index(order)?, made.clone())))
        .collect();
    let verdict = judge(name, keys, &seen, &effects, lost);
    if acks {
        assert_kept(name, &verdict);
    } else {
        assert!(
            seen.unfinished.lock().unwrap().is_empty(),
            "the service did not resume"
        );
    }
    Some(verdict.twice)
}
