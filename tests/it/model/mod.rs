//! The real engine against an executable model of the contract ([`contract`]): seeded random
//! walks of events — requests with handlers that answer, panic or hang, clients that hang up,
//! takeovers of hung handlers, the store's clock moving past leases and TTLs, purges, the store
//! down, completions refused for a moment or for good — through `#[idempotent]` axum handlers
//! on every store. After every step the answer is checked against the model, and with it the
//! invariants:
//!
//! * one operation id per operation: a takeover continues the operation id, a new one is never
//!   an id seen before ([`Contract::started`]);
//! * no response replayed to a request with another fingerprint (`422` instead), and nothing
//!   deleted that a retry needs (the stored response is replayed, the handler does not run);
//! * no key stuck in `409` or `503` past its bound: an attempt that ends in the background
//!   settles its record within ten leases, and the next request runs or replays.
//!
//! A failing walk is shrunk (steps dropped while it still fails) and reported with its seed:
//! `IDEM_MODEL_SEED=<seed> cargo test --all-features --test it model::` replays it.
//! `IDEM_MODEL_WALKS` and `IDEM_MODEL_STEPS` set the length of a run (the long form:
//! `docs/reliability.md`).

mod contract;
mod faulty;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request as HttpRequest, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use idem::store::{Clock, ManualClock, MemoryStore, Store};
use idem::{Fingerprint, Idem, MySqlStore, PostgresStore, Snapshot, idempotent};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::backends::{Backend, Database, Fixture};
use contract::{CompleteFault, Contract, Expect, Plan, Request, Route};
use faulty::Faulty;

// ---------------------------------------------------------------------------------------------
// The service.

#[derive(Clone, Default)]
struct App {
    idem: Option<Idem>,
    runs: Arc<AtomicU32>,
    /// Every handler run: attempt -> (run, operation id).
    log: Arc<Mutex<HashMap<u32, (u32, String)>>>,
    /// The gates of hanging handlers, by attempt.
    gates: Arc<Mutex<HashMap<u32, oneshot::Sender<u16>>>>,
}

impl axum::extract::FromRef<App> for Idem {
    fn from_ref(app: &App) -> Idem {
        app.idem.clone().expect("a handle")
    }
}

#[derive(serde::Deserialize, Fingerprint)]
struct Op {
    payload: u8,
    #[fingerprint(skip)]
    plan: Plan,
    #[fingerprint(skip)]
    attempt: u32,
}

#[derive(serde::Serialize, serde::Deserialize, Snapshot)]
struct Ran {
    #[snapshot(biz_no)]
    biz: String,
    run: u32,
    op: String,
}

async fn handle(app: App, req: Op) -> (StatusCode, Json<Ran>) {
    let op = idem::operation_id()
        .map(|o| o.to_string())
        .unwrap_or_default();
    let run = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let gate = (req.plan == Plan::Hang).then(|| {
        let (tx, rx) = oneshot::channel();
        app.gates.lock().unwrap().insert(req.attempt, tx);
        rx
    });
    let _ = req.payload;
    app.log
        .lock()
        .unwrap()
        .insert(req.attempt, (run, op.clone()));
    let status = match (req.plan, gate) {
        (Plan::Answer(status), _) => status,
        (Plan::Panic, _) => panic!("{HANDLER_PANICS} (attempt {})", req.attempt),
        (_, Some(gate)) => gate.await.unwrap_or(500),
        (Plan::Hang, None) => unreachable!(),
    };
    let body = Ran {
        biz: format!("run-{run}"),
        run,
        op,
    };
    (StatusCode::from_u16(status).unwrap(), Json(body))
}

#[idempotent(scope = global, fingerprint(fields = [payload]), ttl = "1h", lease = "5m")]
async fn exact(State(app): State<App>, Json(req): Json<Op>) -> (StatusCode, Json<Ran>) {
    handle(app, req).await
}

#[idempotent(
    scope = global,
    fingerprint(fields = [payload]),
    ttl = "1h",
    lease = "5m",
    contract = "suppress_only"
)]
async fn suppress(State(app): State<App>, Json(req): Json<Op>) -> (StatusCode, Json<Ran>) {
    handle(app, req).await
}

#[idempotent(
    scope = global,
    fingerprint(fields = [payload]),
    ttl = "1h",
    lease = "300ms",
    timeout = "60s"
)]
async fn short(State(app): State<App>, Json(req): Json<Op>) -> (StatusCode, Json<Ran>) {
    handle(app, req).await
}

// ---------------------------------------------------------------------------------------------
// Steps.

/// One event of a walk. Attempts are named by the step that sent them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Send(Request, Plan),
    /// A hanging handler returns this status.
    Finish(u32, u16),
    /// The client of a hanging handler hangs up (its request future is dropped).
    Drop(u32),
    /// The store's clock moves on, in ms.
    Advance(i64),
    Purge,
    Complete(CompleteFault),
    Down(bool),
}

const STATUSES: [u16; 7] = [201, 201, 200, 409, 422, 402, 500];

/// A small, seedable generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------------------------------------
// A world: the service on one store, the model beside it.

struct World {
    router: Router,
    app: App,
    faulty: Arc<Faulty>,
    clock: Arc<ManualClock>,
    store: Arc<dyn Store>,
    model: Contract,
    /// The prefix of this walk's keys.
    tag: String,
    complete: CompleteFault,
    down: bool,
    /// Requests whose handlers hang, by attempt.
    tasks: HashMap<u32, JoinHandle<Answer>>,
}

/// What a client got.
#[derive(Debug)]
struct Answer {
    status: u16,
    replayed: bool,
    body: serde_json::Value,
}

impl World {
    fn new(store: Arc<dyn Store>, clock: Arc<ManualClock>, tag: String) -> World {
        let faulty = Arc::new(Faulty::new(store.clone()));
        let app = App {
            idem: Some(Idem::from_arc(faulty.clone())),
            ..App::default()
        };
        let router = Router::new()
            .route(Route::Exact.path(), post(exact))
            .route(Route::Suppress.path(), post(suppress))
            .route(Route::Short.path(), post(short))
            .with_state(app.clone());
        let model = Contract::at(clock.now().as_millis());
        World {
            router,
            app,
            faulty,
            clock,
            store,
            model,
            tag,
            complete: CompleteFault::None,
            down: false,
            tasks: HashMap::new(),
        }
    }

    /// Whether `step` may happen now (the rules the generator follows; a shrunk walk skips
    /// the steps they no longer allow).
    fn allows(&self, step: &Step) -> bool {
        let quiet = !self.model.any_hanging();
        match *step {
            Step::Send(request, plan) => {
                if self.complete == CompleteFault::Transient && request.route != Route::Short {
                    // Retried in the background for a whole lease: only the short one.
                    return false;
                }
                plan != Plan::Hang
                    || (request.route != Route::Short
                        && self.complete == CompleteFault::None
                        && !self.down)
            }
            Step::Finish(a, _) | Step::Drop(a) => self.model.hanging.contains_key(&a) && !self.down,
            Step::Advance(_) | Step::Purge => !self.down,
            Step::Complete(_) => quiet && !self.down,
            Step::Down(down) => quiet && down != self.down,
        }
    }

    fn generate(&self, rng: &mut Rng) -> Step {
        loop {
            let step = match rng.below(100) {
                0..=54 => {
                    let route = rng.pick(&Route::ALL);
                    let request = Request {
                        route,
                        key: rng.below(2) as u8,
                        payload: if rng.below(5) == 0 { 1 } else { 0 },
                    };
                    let plan = match rng.below(20) {
                        0 => Plan::Panic,
                        1..=5 => Plan::Hang,
                        _ => Plan::Answer(rng.pick(&STATUSES)),
                    };
                    Step::Send(request, plan)
                }
                55..=76 if !self.model.any_hanging() => continue,
                55..=76 => {
                    let mut hanging: Vec<u32> = self.model.hanging.keys().copied().collect();
                    hanging.sort_unstable();
                    let a = rng.pick(&hanging);
                    if rng.below(3) == 0 {
                        Step::Drop(a)
                    } else {
                        Step::Finish(a, rng.pick(&STATUSES))
                    }
                }
                77..=88 => Step::Advance(rng.pick(&[
                    Route::Exact.lease_ms() + 1,
                    Route::Short.lease_ms() + 1,
                    contract::TTL_MS + 1,
                ])),
                89..=91 => Step::Purge,
                92..=96 => Step::Complete(rng.pick(&[
                    CompleteFault::None,
                    CompleteFault::Transient,
                    CompleteFault::Permanent,
                ])),
                _ => Step::Down(!self.down),
            };
            if self.allows(&step) {
                return step;
            }
        }
    }

    fn request(&self, request: Request, plan: Plan, attempt: u32) -> HttpRequest<Body> {
        let body = serde_json::json!({
            "payload": request.payload,
            "plan": plan,
            "attempt": attempt,
        });
        HttpRequest::post(request.route.path())
            .header("content-type", "application/json")
            .header("idempotency-key", format!("{}-{}", self.tag, request.key))
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    fn spawn(&self, request: Request, plan: Plan, attempt: u32) -> JoinHandle<Answer> {
        let http = self.request(request, plan, attempt);
        let router = self.router.clone();
        tokio::spawn(async move {
            let response = router.oneshot(http).await.unwrap();
            let (parts, body) = response.into_parts();
            let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
            Answer {
                status: parts.status.as_u16(),
                replayed: parts
                    .headers
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true"),
                body: serde_json::from_slice(&bytes).unwrap_or_default(),
            }
        })
    }

    fn ran(&self, attempt: u32) -> Option<(u32, String)> {
        self.app.log.lock().unwrap().get(&attempt).cloned()
    }

    /// Waits until `n` abandons have returned: an attempt that ended in the background has
    /// settled its record. Its bound: ten leases of the route.
    async fn settled(&self, n: u64, route: Route, what: &str) -> Result<(), String> {
        let bound = Duration::from_millis(10 * route.lease_ms().min(1_000) as u64);
        let start = tokio::time::Instant::now();
        while self.faulty.abandons() < n {
            if start.elapsed() > bound {
                return Err(format!(
                    "{what}: the attempt did not end its lease within {bound:?} (ten leases): \
                     the key stays in 409"
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// Runs `step` (attempt `index` if it sends), checking the answer against the model.
    async fn run(&mut self, index: u32, step: Step) -> Result<(), String> {
        match step {
            Step::Send(request, plan) => self.send(index, request, plan).await,
            Step::Finish(attempt, status) => self.finish(attempt, status).await,
            Step::Drop(attempt) => {
                let abandons = self.faulty.abandons();
                let task = self.tasks.remove(&attempt).expect("a hanging request");
                task.abort();
                let _ = task.await;
                self.app.gates.lock().unwrap().remove(&attempt);
                self.settled(abandons + 1, Route::Exact, "a dropped request")
                    .await?;
                self.model.abandoned(attempt);
                Ok(())
            }
            Step::Advance(ms) => {
                self.clock.advance(Duration::from_millis(ms as u64));
                self.model.now += ms;
                Ok(())
            }
            Step::Purge => {
                while self
                    .store
                    .purge_expired(1000)
                    .await
                    .map_err(|e| e.to_string())?
                    > 0
                {}
                self.model.purged();
                Ok(())
            }
            Step::Complete(fault) => {
                self.complete = fault;
                self.faulty.set_complete(fault);
                Ok(())
            }
            Step::Down(down) => {
                self.down = down;
                self.faulty.set_down(down);
                Ok(())
            }
        }
    }

    async fn send(&mut self, attempt: u32, request: Request, plan: Plan) -> Result<(), String> {
        let expect = if self.down {
            Expect::Reject(503)
        } else {
            self.model.send(request)
        };
        let abandons = self.faulty.abandons();
        let task = self.spawn(request, plan, attempt);
        if plan == Plan::Hang {
            // Until the handler hangs, or the request is answered without running it.
            let start = tokio::time::Instant::now();
            while self.ran(attempt).is_none() && !task.is_finished() {
                if start.elapsed() > Duration::from_secs(10) {
                    return Err("no answer and no handler run within 10 s".into());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if let Some((_, op)) = self.ran(attempt) {
                self.model.started(request, &expect, &op, attempt)?;
                self.tasks.insert(attempt, task);
                return Ok(());
            }
        }
        let answer = match task.await {
            Ok(answer) => answer,
            Err(e) if e.is_panic() => {
                let Some((_, op)) = self.ran(attempt) else {
                    return Err("the request panicked without running its handler".into());
                };
                self.model.started(request, &expect, &op, attempt)?;
                self.settled(abandons + 1, request.route, "a panicked handler")
                    .await?;
                self.model.abandoned(attempt);
                return Ok(());
            }
            Err(e) => return Err(format!("the request failed: {e}")),
        };
        match self.ran(attempt) {
            Some((run, op)) => {
                self.model.started(request, &expect, &op, attempt)?;
                let Plan::Answer(status) = plan else {
                    unreachable!("only an answering handler returns")
                };
                own(&answer, run, status)?;
                self.model.answered(attempt, run, status, self.complete);
                if self.complete == CompleteFault::Transient
                    && idem::DefaultPolicy
                        .classify(request.route.contract(), status)
                        .outcome()
                        .is_some()
                {
                    // Stored in the background, which the store refuses every time: the
                    // attempt must give up within its bound and end its lease.
                    self.settled(abandons + 1, request.route, "a result the store refuses")
                        .await?;
                }
                Ok(())
            }
            None => observed(&answer, &expect, request.route),
        }
    }

    async fn finish(&mut self, attempt: u32, status: u16) -> Result<(), String> {
        let holds = self.model.holds(attempt);
        let expect = self.model.superseded(attempt);
        let gate = self.app.gates.lock().unwrap().remove(&attempt);
        let _ = gate.expect("a hanging handler").send(status);
        let task = self.tasks.remove(&attempt).expect("a hanging request");
        let answer = task.await.map_err(|e| format!("the request failed: {e}"))?;
        let (run, _) = self.ran(attempt).expect("a handler that ran");
        if holds {
            own(&answer, run, status)?;
            self.model.answered(attempt, run, status, self.complete);
            return Ok(());
        }
        let route = self
            .model
            .hanging
            .remove(&attempt)
            .expect("hanging")
            .request
            .route;
        match expect {
            Expect::Own => own(&answer, run, status),
            expect => {
                observed(&answer, &expect, route).map_err(|e| format!("a superseded attempt: {e}"))
            }
        }
    }
}

use idem::OutcomePolicy as _;

/// Checks that `answer` is the handler's own: `status`, run `run`, not a replay.
fn own(answer: &Answer, run: u32, status: u16) -> Result<(), String> {
    if answer.status != status || answer.replayed || answer.body["run"] != run {
        return Err(format!(
            "the handler's own answer ({status}, run {run}) expected, got {answer:?}"
        ));
    }
    Ok(())
}

/// Checks an answer that did not run the handler against `expect`.
fn observed(answer: &Answer, expect: &Expect, route: Route) -> Result<(), String> {
    let ok = match expect {
        Expect::Reject(code) => answer.status == *code && !answer.replayed,
        Expect::Replay { run, status } => {
            answer.replayed
                && answer.body["biz"] == format!("run-{run}")
                && (route == Route::Suppress || answer.status == *status)
        }
        Expect::Run { .. } | Expect::Own => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected {expect:?}, got {answer:?} without a handler run"
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Walks, shrinking, one test per store.

/// Runs `steps` (or generates `length` steps from `seed` when `steps` is `None`) in a new world
/// on `store`; returns the steps run and the first violation.
async fn walk(
    store: &Arc<dyn Store>,
    clock: &Arc<ManualClock>,
    seed: u64,
    length: u32,
    steps: Option<&[Step]>,
) -> (Vec<Step>, Option<String>) {
    static WALKS: AtomicU32 = AtomicU32::new(0);
    let tag = format!(
        "model-{seed:x}-{}-{}",
        WALKS.fetch_add(1, Ordering::SeqCst),
        std::process::id()
    );
    let mut world = World::new(store.clone(), clock.clone(), tag);
    let mut rng = Rng(seed);
    let mut done = Vec::new();
    let total = steps.map_or(length as usize, <[Step]>::len);
    for i in 0..total {
        let step = match steps {
            Some(steps) if world.allows(&steps[i]) => steps[i],
            Some(_) => continue,
            None => world.generate(&mut rng),
        };
        done.push(step);
        // Attempts are named by the step's index in the original walk.
        let index = i as u32;
        if let Err(e) = world.run(index, step).await {
            world.end().await;
            return (
                done_named(steps, &done, i),
                Some(format!("step {i} {step:?}: {e}")),
            );
        }
    }
    world.end().await;
    (done, None)
}

/// The steps as a reproducible list (when replaying a given list, its indices are kept).
fn done_named(given: Option<&[Step]>, done: &[Step], upto: usize) -> Vec<Step> {
    match given {
        Some(steps) => steps[..=upto].to_vec(),
        None => done.to_vec(),
    }
}

impl World {
    /// Ends the walk: hanging handlers are let go, the faults cleared.
    async fn end(&mut self) {
        self.faulty.set_down(false);
        self.faulty.set_complete(CompleteFault::None);
        for (_, gate) in self.app.gates.lock().unwrap().drain() {
            let _ = gate.send(200);
        }
        for (_, task) in self.tasks.drain() {
            let _ = task.await;
        }
    }
}

/// Drops steps while the walk still fails: the shortest failing list this finds.
async fn shrink(
    store: &Arc<dyn Store>,
    clock: &Arc<ManualClock>,
    seed: u64,
    mut steps: Vec<Step>,
) -> (Vec<Step>, String) {
    let (_, Some(mut error)) = walk(store, clock, seed, 0, Some(&steps)).await else {
        return (steps, "the failure did not repeat (a race?)".into());
    };
    let mut chunk = steps.len().div_ceil(2);
    while chunk >= 1 {
        let mut at = 0;
        while at < steps.len() {
            // Removing steps renames attempts: keep the indices by replacing with a no-op.
            let mut candidate = steps.clone();
            let end = (at + chunk).min(candidate.len());
            for s in &mut candidate[at..end] {
                *s = Step::Advance(0);
            }
            if candidate != steps
                && let (_, Some(e)) = walk(store, clock, seed, 0, Some(&candidate)).await
            {
                steps = candidate;
                error = e;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    (steps, error)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs the walks on `store`: `IDEM_MODEL_WALKS` walks of `IDEM_MODEL_STEPS` steps, from
/// `IDEM_MODEL_SEED` (a seed of each backend otherwise).
async fn walks(backend: Backend, store: Arc<dyn Store>, clock: Arc<ManualClock>) {
    let first = env_u64("IDEM_MODEL_SEED", 0x1de3_0000 + backend as u64);
    let count = env_u64("IDEM_MODEL_WALKS", 40);
    let length = env_u64("IDEM_MODEL_STEPS", 40) as u32;
    let started = std::time::Instant::now();
    for n in 0..count {
        let seed = first.wrapping_add(n);
        let (steps, error) = walk(&store, &clock, seed, length, None).await;
        if error.is_some() {
            let (shrunk, error) = shrink(&store, &clock, seed, steps).await;
            let listed: Vec<String> = shrunk
                .iter()
                .enumerate()
                .filter(|(_, s)| **s != Step::Advance(0))
                .map(|(i, s)| format!("  {i}: {s:?}"))
                .collect();
            panic!(
                "{}: the engine broke the contract (IDEM_MODEL_SEED={seed}):\n{error}\nshrunk walk:\n{}",
                backend.name(),
                listed.join("\n")
            );
        }
    }
    eprintln!(
        "model {}: {count} walks of {length} steps in {:?}",
        backend.name(),
        started.elapsed()
    );
}

/// The store of `backend` on a manual clock: PostgreSQL and MariaDB on a database of their own
/// (the walks move the clock by hours and purge what it expires), the others fresh.
async fn open(backend: Backend) -> Option<(Arc<dyn Store>, Arc<ManualClock>, Keep)> {
    let clock = Arc::new(ManualClock::starting_now());
    let dyn_clock = clock.clone() as Arc<dyn Clock>;
    match backend {
        Backend::Postgres | Backend::Mysql => {
            let db: Database = backend.database().await?;
            let store: Arc<dyn Store> = if backend == Backend::Postgres {
                Arc::new(
                    PostgresStore::connect(&db.url)
                        .await
                        .unwrap()
                        .with_clock(dyn_clock),
                )
            } else {
                Arc::new(
                    MySqlStore::connect(&db.url)
                        .await
                        .unwrap()
                        .with_clock(dyn_clock),
                )
            };
            store.migrate().await.unwrap();
            Some((store, clock, Keep::Database(db)))
        }
        Backend::Memory => Some((
            Arc::new(MemoryStore::with_clock(dyn_clock)),
            clock,
            Keep::Nothing,
        )),
        _ => {
            let fixture = backend.open_with_clock(clock.clone()).await?;
            Some((
                fixture.store.clone(),
                clock,
                Keep::Fixture(Box::new(fixture)),
            ))
        }
    }
}

/// What must live as long as a store.
#[allow(dead_code)]
enum Keep {
    Nothing,
    Database(Database),
    Fixture(Box<Fixture>),
}

/// The handler's own panics are part of the walks: not printed (any other panic still is).
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info.payload().downcast_ref::<String>();
            if !message.is_some_and(|m| m.starts_with(HANDLER_PANICS)) {
                previous(info);
            }
        }));
    });
}

const HANDLER_PANICS: &str = "the model's handler panics";

async fn on(backend: Backend) {
    quiet_panics();
    if let Some((store, clock, _keep)) = open(backend).await {
        walks(backend, store, clock).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    on(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    on(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    on(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    on(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    on(Backend::Redis).await;
}
