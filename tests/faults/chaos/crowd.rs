//! Items 1 and 2: several processes of the example on one database, a crowd of clients sending
//! hundreds of keys (half of them duplicated, concurrently and later) and retrying as a real
//! client does, while processes are killed with `SIGKILL` and restarted at random, and (item 2)
//! clients hang up at random points of their requests and retry later.
//!
//! At the end: every key got a `2xx`; every `2xx` of a key was byte-identical; no `429`, no
//! `500`, no status but `2xx`, `409` and `503` (each with `Retry-After`) was ever seen; every key
//! replays byte-identically through every process; the business table has one row per key and no
//! order two; each row carries its key's operation id; and no record is left processing.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{self, Cut, Failure, Response};
use super::fleet::{Backend, Database, Fleet};
use super::rng::{self, Rng};
use super::{Knobs, report};

/// The longest a client waits between two tries after `409` or `503` (it honours `Retry-After`,
/// capped: the lease of a killed holder would make it wait up to 10 s).
const RETRY_CAP: Duration = Duration::from_millis(250);
/// A client gives up a request without an answer by then, and retries (elsewhere, probably): a
/// request to a frozen process is not waited for. Beyond the longest answer of a live process
/// (the engine's 2 s store timeout, twice, plus the handler).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries of one client before it reports the key as never answered.
const MAX_TRIES: u32 = 2_000;
/// The example's lease (`lease = "10s"`): a freeze lasts longer.
const FREEZE: Duration = Duration::from_secs(10);

/// What one run does.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub name: &'static str,
    pub backend: Backend,
    /// `PAYMENTS_DELAY_MS` of the processes.
    pub delay_ms: u64,
    /// Kill and restart processes during the run.
    pub kills: bool,
    /// Freeze processes past their lease and thaw them during the run.
    pub freezes: bool,
    /// The chance that a try hangs up instead of waiting for its answer.
    pub hang_ups: f64,
}

/// Counters of one run.
#[derive(Default)]
pub struct Tally {
    pub requests: AtomicU64,
    pub fresh: AtomicU64,
    pub replayed: AtomicU64,
    pub conflict: AtomicU64,
    pub store_unavailable: AtomicU64,
    pub timed_out: AtomicU64,
    pub database_unavailable: AtomicU64,
    pub other_503: AtomicU64,
    pub too_many: AtomicU64,
    pub server_error: AtomicU64,
    pub other_status: AtomicU64,
    pub refused: AtomicU64,
    pub broken: AtomicU64,
    pub timeouts: AtomicU64,
    pub cut_mid_request: AtomicU64,
    pub cut_after: AtomicU64,
    pub cut_after_answer: AtomicU64,
    pub kills: AtomicU64,
    pub startup_kills: AtomicU64,
    pub freezes: AtomicU64,
    pub replay_requests: AtomicU64,
    pub replay_reruns: AtomicU64,
}

fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl Tally {
    /// Counts an answer by its status (and problem type).
    fn count(&self, r: &Response) {
        match r.status {
            200..=299 if r.replayed() => add(&self.replayed),
            200..=299 => add(&self.fresh),
            409 => add(&self.conflict),
            503 => match r.problem().as_deref() {
                Some("store-unavailable") => add(&self.store_unavailable),
                Some("timed-out") => add(&self.timed_out),
                Some("database-unavailable") => add(&self.database_unavailable),
                _ => add(&self.other_503),
            },
            429 => add(&self.too_many),
            500 => add(&self.server_error),
            _ => add(&self.other_status),
        }
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s503 = get(&self.store_unavailable)
            + get(&self.timed_out)
            + get(&self.database_unavailable)
            + get(&self.other_503);
        write!(
            f,
            "requests {} (2xx {} ran + {} replayed, 409 {}, 503 {} [store-unavailable {}, \
             timed-out {}, database-unavailable {}, other {}], 429 {}, 500 {}, other {}; \
             refused {}, broken {}, timed out {}; hung up {} mid-request, {} after sending, {} \
             after the answer), kills {} (+{} while starting), freezes past the lease {}",
            get(&self.requests),
            get(&self.fresh),
            get(&self.replayed),
            get(&self.conflict),
            s503,
            get(&self.store_unavailable),
            get(&self.timed_out),
            get(&self.database_unavailable),
            get(&self.other_503),
            get(&self.too_many),
            get(&self.server_error),
            get(&self.other_status),
            get(&self.refused),
            get(&self.broken),
            get(&self.timeouts),
            get(&self.cut_mid_request),
            get(&self.cut_after),
            get(&self.cut_after_answer),
            get(&self.kills),
            get(&self.startup_kills),
            get(&self.freezes),
        )
    }
}

/// One key: its own order, its own amount.
struct KeySpec {
    key: String,
    order_id: String,
    /// Cents.
    cents: u64,
}

impl KeySpec {
    fn new(tag: &str, i: usize) -> KeySpec {
        KeySpec {
            key: format!("k{i}-{tag}"),
            order_id: format!("ord-{i}-{tag}"),
            cents: 100 + (i as u64 * 7_919) % 99_900,
        }
    }

    /// The request, written one of the equivalent ways a retrying client may write it
    /// (`"12.50"`, `12.5`, `"12.500"`; another `client_ip` and `timestamp`: not hashed).
    fn request(&self, rng: &mut Rng) -> Vec<u8> {
        let text = format!("{}.{:02}", self.cents / 100, self.cents % 100);
        let amount: Value = match rng.below(3) {
            0 => json!(text),
            1 => serde_json::from_str(&text).unwrap(),
            _ => json!(format!("{text}0")),
        };
        let body = json!({
            "amount": amount,
            "currency": "EUR",
            "customer_id": format!("cus_{}", self.cents % 13),
            "order_id": self.order_id,
            "client_ip": format!("203.0.113.{}", rng.below(256)),
            "timestamp": rng.next() % 1_000_000_000,
        })
        .to_string();
        client::request(
            "POST",
            "/v1/payments",
            &[("Idempotency-Key", &self.key)],
            Some(&body),
        )
    }
}

/// The first `2xx` of a key: every later one must be the same, byte for byte.
#[derive(Clone)]
struct Success {
    body: Vec<u8>,
    location: Option<String>,
}

struct Run {
    plan: Plan,
    keys: Vec<KeySpec>,
    addrs: Vec<SocketAddr>,
    successes: Mutex<Vec<Option<Success>>>,
    tally: Tally,
    violations: Mutex<Vec<String>>,
    /// Held while a process is killed and restarted, or frozen: one fault at a time.
    faults: tokio::sync::Mutex<()>,
    /// The process frozen now (never killed meanwhile).
    frozen: Mutex<Option<usize>>,
}

impl Run {
    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    /// Checks a `2xx` of key `i` and keeps the first.
    fn succeeded(&self, i: usize, r: &Response) {
        let spec = &self.keys[i];
        if r.status != 201 {
            self.violation(format!("{}: {} {}", spec.key, r.status, r.text()));
        }
        let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let payment_id = body["payment_id"].as_str().unwrap_or_default();
        if body["order_id"] != spec.order_id.as_str() || !payment_id.starts_with("pay_") {
            self.violation(format!("{}: unexpected body {}", spec.key, r.text()));
        }
        let this = Success {
            body: r.body.clone(),
            location: r.header("location").map(str::to_owned),
        };
        let mut successes = self.successes.lock().unwrap();
        match &successes[i] {
            None => successes[i] = Some(this),
            Some(first) if first.body == this.body && first.location == this.location => {}
            Some(first) => {
                let first = String::from_utf8_lossy(&first.body).into_owned();
                drop(successes);
                self.violation(format!(
                    "{}: two different 2xx: {first} and {} (replayed: {})",
                    spec.key,
                    r.text(),
                    r.replayed()
                ));
            }
        }
    }
}

/// Sends key `i` until it is answered `2xx`, as a real client does: to a process chosen at
/// random each time; after `409` or `503` it waits `Retry-After` (capped at [`RETRY_CAP`]), after
/// a refused or broken connection a moment; with the plan's chance it hangs up instead, and
/// retries up to a second later. Any other status is a violation.
async fn until_success(run: &Run, i: usize, rng: &mut Rng, hang_ups: bool) -> Option<Response> {
    let tally = &run.tally;
    let mut cuts = 0;
    for _ in 0..MAX_TRIES {
        let addr = run.addrs[rng.below(run.addrs.len() as u64) as usize];
        let raw = run.keys[i].request(rng);
        add(&tally.requests);
        if hang_ups && cuts < 3 && rng.chance(run.plan.hang_ups) {
            cuts += 1;
            let cut = match rng.below(3) {
                0 => {
                    add(&tally.cut_mid_request);
                    Cut::MidRequest
                }
                1 => {
                    add(&tally.cut_after);
                    Cut::After(rng.between(0, 2 * run.plan.delay_ms + 50))
                }
                _ => {
                    add(&tally.cut_after_answer);
                    Cut::AfterAnswer
                }
            };
            match client::hang_up(addr, &raw, cut, REQUEST_TIMEOUT).await {
                Ok(()) => {}
                Err(Failure::Connect(_)) => add(&tally.refused),
                Err(Failure::Broken(_)) => add(&tally.broken),
                Err(Failure::Timeout) => add(&tally.timeouts),
            }
            tokio::time::sleep(Duration::from_millis(rng.between(0, 1_000))).await;
            continue;
        }
        match client::exchange(addr, &raw, REQUEST_TIMEOUT).await {
            Ok(r) => {
                tally.count(&r);
                match r.status {
                    200..=299 => {
                        run.succeeded(i, &r);
                        return Some(r);
                    }
                    409 | 503 => {
                        let Some(secs) = r.retry_after() else {
                            run.violation(format!(
                                "{}: {} without Retry-After",
                                r.status,
                                r.text()
                            ));
                            return None;
                        };
                        let wait = Duration::from_secs(secs).min(RETRY_CAP);
                        let jitter = Duration::from_millis(rng.below(50));
                        tokio::time::sleep(wait + jitter).await;
                    }
                    _ => {
                        let key = &run.keys[i].key;
                        run.violation(format!("{key}: {} {}", r.status, r.text()));
                        return None;
                    }
                }
            }
            Err(failure) => {
                match failure {
                    Failure::Connect(_) => add(&tally.refused),
                    Failure::Broken(_) => add(&tally.broken),
                    Failure::Timeout => add(&tally.timeouts),
                }
                tokio::time::sleep(Duration::from_millis(rng.between(10, 100))).await;
            }
        }
    }
    run.violation(format!(
        "{}: no 2xx after {MAX_TRIES} tries",
        run.keys[i].key
    ));
    None
}

/// The jobs: keys to send, and the keys sent so far (for later duplicates).
struct Jobs {
    queue: VecDeque<usize>,
    total: usize,
    started: Vec<usize>,
    since: Instant,
    deadline: Instant,
}

impl Jobs {
    /// The next key to send: a new one while the keys started lag behind the time elapsed
    /// (fresh keys are spread over the whole run, so that kills land on running handlers),
    /// a later duplicate of a duplicated key otherwise; `None` once all keys are sent and the
    /// deadline passed.
    fn next(&mut self, rng: &mut Rng) -> Option<usize> {
        let now = Instant::now();
        let elapsed = now.duration_since(self.since).as_secs_f64();
        let span = self
            .deadline
            .duration_since(self.since)
            .as_secs_f64()
            .max(0.001);
        let due = ((elapsed / span).min(1.0) * self.total as f64).ceil() as usize;
        let sent = self.total - self.queue.len();
        if (sent <= due || now >= self.deadline)
            && let Some(i) = self.queue.pop_front()
        {
            self.started.push(i);
            return Some(i);
        }
        if now >= self.deadline {
            return None;
        }
        let duplicated: Vec<usize> = self
            .started
            .iter()
            .copied()
            .filter(|i| i % 2 == 0)
            .collect();
        if duplicated.is_empty() {
            return self.queue.pop_front().inspect(|&i| self.started.push(i));
        }
        Some(duplicated[rng.below(duplicated.len() as u64) as usize])
    }
}

/// A client: sends the keys the jobs hand out, each until it is answered `2xx`.
async fn client(run: Arc<Run>, jobs: Arc<Mutex<Jobs>>, mut rng: Rng) {
    loop {
        let Some(i) = jobs.lock().unwrap().next(&mut rng) else {
            return;
        };
        until_success(&run, i, &mut rng, run.plan.hang_ups > 0.0).await;
        tokio::time::sleep(Duration::from_millis(rng.below(20))).await;
    }
}

/// Kills a random process with `SIGKILL` every 0.2-1.2 s until the deadline, and restarts it
/// 0-0.4 s later on its port.
/// One time in five the restarted process is killed again while it starts (migrations, tables),
/// and started once more.
async fn killer(run: Arc<Run>, fleet: Arc<Fleet>, deadline: Instant, mut rng: Rng) {
    loop {
        tokio::time::sleep(Duration::from_millis(rng.between(200, 1_200))).await;
        if Instant::now() >= deadline {
            return;
        }
        let _faults = run.faults.lock().await;
        let i = rng.below(fleet.len() as u64) as usize;
        if *run.frozen.lock().unwrap() == Some(i) {
            continue;
        }
        fleet.kill(i);
        add(&run.tally.kills);
        tokio::time::sleep(Duration::from_millis(rng.between(0, 400))).await;
        if rng.chance(0.2) {
            fleet.spawn(i);
            tokio::time::sleep(Duration::from_millis(rng.between(0, 150))).await;
            fleet.kill(i);
            add(&run.tally.startup_kills);
        }
        fleet.restart(i).await;
    }
}

/// Freezes a random process with `SIGSTOP` past its lease (10 s + 0.5-2 s), so that the others
/// take its running operations over, then thaws it with `SIGCONT`: every handler it was running
/// becomes a zombie at once (S23). The first freeze starts in the first half of the run, the next
/// ones 2-20 s after the previous thaw, until the deadline.
async fn freezer(run: Arc<Run>, fleet: Arc<Fleet>, deadline: Instant, mut rng: Rng) {
    let half = deadline.saturating_duration_since(Instant::now()) / 2;
    let mut pause = Duration::from_millis(rng.below(half.as_millis() as u64 + 1));
    loop {
        if Instant::now() + pause >= deadline {
            return;
        }
        tokio::time::sleep(pause).await;
        let i = {
            let _faults = run.faults.lock().await;
            let i = rng.below(fleet.len() as u64) as usize;
            fleet.signal(i, "STOP");
            *run.frozen.lock().unwrap() = Some(i);
            i
        };
        add(&run.tally.freezes);
        tokio::time::sleep(FREEZE + Duration::from_millis(rng.between(500, 2_000))).await;
        fleet.signal(i, "CONT");
        *run.frozen.lock().unwrap() = None;
        pause = Duration::from_millis(rng.between(2_000, 20_000));
    }
}

/// Every key through every process: a replay byte-identical to the key's first `2xx`. A key
/// whose record was left processing (its client got the handler's answer, the completion was
/// retried in the background, and the process was killed before it landed) is taken over here
/// and answered by a rerun under the same operation id: counted, and held to the same bytes.
async fn replay_everywhere(run: &Arc<Run>, rng: &mut Rng) {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (run, next, mut rng) = (run.clone(), next.clone(), rng.fork());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= run.keys.len() {
                        return;
                    }
                    for addr in run.addrs.clone() {
                        replay_one(&run, i, addr, &mut rng).await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

async fn replay_one(run: &Run, i: usize, addr: SocketAddr, rng: &mut Rng) {
    let key = &run.keys[i].key;
    for _ in 0..400 {
        add(&run.tally.replay_requests);
        match client::exchange(addr, &run.keys[i].request(rng), REQUEST_TIMEOUT).await {
            Ok(r) if (200..300).contains(&r.status) => {
                if !r.replayed() {
                    add(&run.tally.replay_reruns);
                }
                let first = run.successes.lock().unwrap()[i].clone();
                match first {
                    None => run.violation(format!("{key}: no 2xx during the run")),
                    Some(first) if first.body == r.body => {}
                    Some(first) => run.violation(format!(
                        "{key}: replay through {addr} differs: {} vs {}",
                        String::from_utf8_lossy(&first.body),
                        r.text()
                    )),
                }
                if r.header("location").map(str::to_owned)
                    != run.successes.lock().unwrap()[i]
                        .as_ref()
                        .and_then(|s| s.location.clone())
                {
                    run.violation(format!("{key}: replay through {addr}: another Location"));
                }
                return;
            }
            Ok(r) if r.status == 409 || r.status == 503 => {}
            Ok(r) => {
                run.violation(format!(
                    "{key}: replay through {addr}: {} {}",
                    r.status,
                    r.text()
                ));
                return;
            }
            Err(_) => {}
        }
        tokio::time::sleep(RETRY_CAP).await;
    }
    run.violation(format!("{key}: no replay through {addr}"));
}

/// The database at the end: one completed record per key whose operation id is the one its
/// payment carries, one payment per key, none per order twice, nothing processing.
async fn check_database(run: &Run, db: &Database) -> String {
    let mut records = db.records().await;
    let started = Instant::now();
    // A completion still being retried in the background lands within its lease.
    while records.iter().any(|r| r.state == 0) && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        records = db.records().await;
    }
    let processing = records.iter().filter(|r| r.state == 0).count();
    if processing > 0 {
        run.violation(format!("{processing} records still processing"));
    }
    let takeovers = records.iter().filter(|r| r.fence > 1).count();
    let max_fence = records.iter().map(|r| r.fence).max().unwrap_or(0);
    if records.len() != run.keys.len() {
        run.violation(format!(
            "{} records for {} keys",
            records.len(),
            run.keys.len()
        ));
    }
    let by_key: HashMap<&str, _> = records.iter().map(|r| (r.client_key.as_str(), r)).collect();
    let payments = db.payments().await;
    let mut by_order: HashMap<&str, Vec<_>> = HashMap::new();
    for p in &payments {
        by_order.entry(p.order_id.as_str()).or_default().push(p);
    }
    if payments.len() != run.keys.len() {
        run.violation(format!(
            "{} payments for {} keys",
            payments.len(),
            run.keys.len()
        ));
    }
    let successes = run.successes.lock().unwrap().clone();
    for (spec, success) in run.keys.iter().zip(&successes) {
        let Some(record) = by_key.get(spec.key.as_str()) else {
            run.violation(format!("{}: no record", spec.key));
            continue;
        };
        if record.state != 1 {
            run.violation(format!("{}: record in state {}", spec.key, record.state));
        }
        let expected = format!("pay_{}", record.operation_id.replace('-', ""));
        let rows = by_order
            .get(spec.order_id.as_str())
            .cloned()
            .unwrap_or_default();
        if rows.len() != 1 {
            run.violation(format!("{}: {} payments", spec.order_id, rows.len()));
        }
        for row in rows {
            if row.payment_id != expected || row.operation_id != record.operation_id {
                run.violation(format!(
                    "{}: payment {} of operation {}, record's operation {}",
                    spec.key, row.payment_id, row.operation_id, record.operation_id
                ));
            }
        }
        if let Some(success) = success {
            let body: Value = serde_json::from_slice(&success.body).unwrap_or_default();
            if body["payment_id"] != expected.as_str() {
                run.violation(format!(
                    "{}: answered {}, the record's operation is {}",
                    spec.key, body["payment_id"], record.operation_id
                ));
            }
        }
    }
    // The example's own count of its business rows agrees.
    let stats = client::request("GET", "/v1/stats", &[], None);
    match client::exchange(run.addrs[0], &stats, REQUEST_TIMEOUT).await {
        Ok(r) if r.status == 200 => {
            let stats: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if stats["payments"] != run.keys.len() {
                run.violation(format!("GET /v1/stats: {stats}"));
            }
        }
        other => run.violation(format!("GET /v1/stats: {other:?}")),
    }
    format!(
        "records {} (taken over {takeovers}, highest fence {max_fence}, processing {processing}), \
         payments {} for {} keys",
        records.len(),
        payments.len(),
        run.keys.len()
    )
}

/// Runs `plan` on a fresh database of its backend; panics on any violation, after printing the
/// tally.
pub async fn run(plan: Plan, knobs: &Knobs) {
    let Some(db) = plan.backend.database().await else {
        return;
    };
    run_on(plan, db, knobs).await;
}

/// Runs `plan` on `db` (on a multi-primary cluster, process `i` on node `i`).
pub async fn run_on(plan: Plan, db: Database, knobs: &Knobs) {
    let started = Instant::now();
    let seed = rng::seed();
    let mut rng = Rng::new(seed ^ fxhash(plan.name) ^ fxhash(plan.backend.name()));
    let delay = ("PAYMENTS_DELAY_MS", plan.delay_ms.to_string());
    let fleet = Arc::new(Fleet::start(&db, knobs.processes, &[delay]).await);
    let tag = format!("{:08x}", rng.next() as u32);
    let keys: Vec<KeySpec> = (0..knobs.keys).map(|i| KeySpec::new(&tag, i)).collect();
    // Half of the keys are duplicated: 2 or 3 clients send them at once (adjacent jobs), and
    // later duplicates follow until the deadline.
    let mut order: Vec<usize> = (0..keys.len()).collect();
    for k in (1..order.len()).rev() {
        order.swap(k, rng.below(k as u64 + 1) as usize);
    }
    let mut jobs = VecDeque::new();
    for i in order {
        let copies = if i % 2 == 0 { rng.between(2, 3) } else { 1 };
        jobs.extend(std::iter::repeat_n(i, copies as usize));
    }
    let run = Arc::new(Run {
        plan,
        successes: Mutex::new(vec![None; keys.len()]),
        keys,
        addrs: fleet.addrs(),
        tally: Tally::default(),
        violations: Mutex::new(Vec::new()),
        faults: tokio::sync::Mutex::new(()),
        frozen: Mutex::new(None),
    });
    let deadline = Instant::now() + Duration::from_secs(knobs.seconds);
    let jobs = Arc::new(Mutex::new(Jobs {
        total: jobs.len(),
        queue: jobs,
        started: Vec::new(),
        since: Instant::now(),
        deadline,
    }));
    let mut tasks: Vec<_> = (0..knobs.clients)
        .map(|_| tokio::spawn(client(run.clone(), jobs.clone(), rng.fork())))
        .collect();
    if plan.kills {
        let killing = killer(run.clone(), fleet.clone(), deadline, rng.fork());
        tasks.push(tokio::spawn(killing));
    }
    if plan.freezes {
        let freezing = freezer(run.clone(), fleet.clone(), deadline, rng.fork());
        tasks.push(tokio::spawn(freezing));
    }
    // A hang detector, far beyond any wait of a correct run (a killed holder's lease is 10 s).
    let bound = Duration::from_secs(knobs.seconds + 240);
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    if tokio::time::timeout(bound, all).await.is_err() {
        panic!(
            "{} on {}: clients still running after {bound:?}: {}",
            plan.name,
            plan.backend.name(),
            run.tally
        );
    }
    fleet.assert_alive();
    let clients_done = started.elapsed();
    replay_everywhere(&run, &mut rng).await;
    let database = check_database(&run, &db).await;
    report(&format!(
        "chaos {} [{}]: {} processes, {} keys, {} clients, PAYMENTS_DELAY_MS={}, seed {seed}: \
         {}; clients done in {:.1} s; replay through every process: {} requests, {} reruns \
         ({} requests in all); {database}; {:.1} s in all",
        plan.name,
        plan.backend.name(),
        run.addrs.len(),
        run.keys.len(),
        knobs.clients,
        plan.delay_ms,
        run.tally,
        clients_done.as_secs_f64(),
        get(&run.tally.replay_requests),
        get(&run.tally.replay_reruns),
        get(&run.tally.requests) + get(&run.tally.replay_requests),
        started.elapsed().as_secs_f64(),
    ));
    let violations = run.violations.lock().unwrap();
    assert!(
        violations.is_empty(),
        "{} on {}: {} violations (seed {seed}), the first:\n{}",
        plan.name,
        plan.backend.name(),
        violations.len(),
        violations
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    for counter in [&run.tally.too_many, &run.tally.server_error] {
        assert_eq!(get(counter), 0);
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
