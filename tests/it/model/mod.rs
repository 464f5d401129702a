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
use idem::MemoryStore;
use idem::store::{Clock, ManualClock, Store, Timestamp};
use idem::{Fingerprint, Idem, MySqlStore, PostgresStore, Snapshot, SqliteStore, idempotent};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::backends::Backend;
use crate::records::Records;
use contract::{CompleteFault, Contract, Expect, Plan, Request, Route, Tamper};
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

#[idempotent(
    scope = global,
    fingerprint(fields = [payload]),
    ttl = "1h",
    remember = "10h",
    lease = "5m"
)]
async fn remembered(State(app): State<App>, Json(req): Json<Op>) -> (StatusCode, Json<Ran>) {
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
    /// An operator reads the record with `idem inspect` (SQL stores).
    Inspect(Route, u8),
    /// An operator runs `idem release` (`true`) or `idem expire` on the record they inspected
    /// last, naming it as `inspect` showed it.
    Operator(bool, Route, u8),
    /// Encryption switched on (`1`), its key rotated (`2`), or switched off (`3`): see
    /// [`World::encrypt`].
    Encrypt(u8),
    /// A database writer alters a sealed, stored record (SQL stores and Redis).
    Tamper(Tamper, Route, u8),
    /// An operator runs `idem rekey` with the key ring in force (SQL stores).
    Rekey,
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
    /// The database the `idem` CLI reaches (SQL stores only).
    cli: Option<String>,
    /// What the operator's last `inspect` of each key showed: operation id and fence.
    seen: HashMap<(Route, u8), (String, u64)>,
    /// The key ring in force ([`World::encrypt`]).
    encryption: u8,
    /// The store's records, written directly by a database writer (not on the memory store).
    records: Option<Records>,
}

/// The service's routes over `app`.
fn router(app: App) -> Router {
    Router::new()
        .route(Route::Exact.path(), post(exact))
        .route(Route::Suppress.path(), post(suppress))
        .route(Route::Short.path(), post(short))
        .route(Route::Remembered.path(), post(remembered))
        .with_state(app)
}

/// Whether a handle of encryption level `level` seals what it stores: on (`1`), rotated (`2`),
/// not once switched off (`3`: the keys still open what they sealed).
fn seals(level: u8) -> bool {
    contract::seals_under(level).is_some()
}

/// The keys of encryption level `level` ([`World::encrypt`]), as `IDEM_ENCRYPTION_KEYS` and
/// `KeyRing::parse` take them.
fn keys(level: u8) -> Option<&'static str> {
    const K1: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    const K2_K1: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=,\
        k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    match level {
        0 => None,
        1 => Some(K1),
        _ => Some(K2_K1),
    }
}

/// The ring of `level`, accepting the plaintext records written before it (the walks switch
/// encryption on over a store that holds them), and sealing nothing once switched off.
fn key_ring(level: u8) -> Option<idem::seal::KeyRing> {
    let ring = idem::seal::KeyRing::parse(keys(level)?).unwrap();
    Some(if seals(level) {
        ring.accepting_plaintext()
    } else {
        ring.sealing_nothing()
    })
}

/// What a client got.
#[derive(Debug)]
struct Answer {
    status: u16,
    replayed: bool,
    body: serde_json::Value,
}

impl World {
    fn new(
        store: Arc<dyn Store>,
        clock: Arc<ManualClock>,
        tag: String,
        cli: Option<String>,
        records: Option<Records>,
    ) -> World {
        let faulty = Arc::new(Faulty::new(store.clone()));
        let app = App {
            idem: Some(Idem::from_arc(faulty.clone())),
            ..App::default()
        };
        let router = router(app.clone());
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
            cli,
            seen: HashMap::new(),
            encryption: 0,
            records,
        }
    }

    /// Encryption from now on: `0` none, `1` sealed under `k1`, `2` under `k2` with `k1` kept
    /// to open what it sealed, `3` switched off (both keys open, nothing is sealed). Requests
    /// already running keep the handle they started with.
    fn encrypt(&mut self, level: u8) {
        let mut idem = Idem::from_arc(self.faulty.clone());
        if let Some(ring) = key_ring(level) {
            idem = idem.with_encryption(ring);
        }
        self.app.idem = Some(idem);
        self.router = router(self.app.clone());
        self.encryption = level;
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
            Step::Inspect(..) => self.cli.is_some() && !self.down,
            Step::Operator(_, route, key) => {
                self.cli.is_some() && !self.down && self.seen.contains_key(&(route, key))
            }
            Step::Encrypt(level) => level == self.encryption + 1 && level <= 3,
            // A record that does not open makes `rekey` exit 1.
            Step::Rekey => {
                self.cli.is_some()
                    && !self.down
                    && self.encryption > 0
                    && !self.model.any_tampered()
            }
            Step::Tamper(_, route, key) => {
                self.records.is_some()
                    && !self.down
                    && self
                        .model
                        .tamperable()
                        .iter()
                        .any(|(r, k, _)| (*r, *k) == (route, key))
            }
        }
    }

    fn generate(&self, rng: &mut Rng) -> Step {
        loop {
            let step = match rng.below(110) {
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
                    contract::REMEMBER_MS - contract::TTL_MS + 1,
                ])),
                89..=92 => Step::Purge,
                // An operator looks at records that exist, and acts on records they looked at.
                93..=95 => {
                    let keys = self.model.keys();
                    if keys.is_empty() {
                        continue;
                    }
                    let (route, key) = rng.pick(&keys);
                    Step::Inspect(route, key)
                }
                96..=98 => {
                    let mut seen: Vec<(Route, u8)> = self.seen.keys().copied().collect();
                    if seen.is_empty() {
                        continue;
                    }
                    seen.sort_unstable_by_key(|(route, key)| (route.path(), *key));
                    let (route, key) = rng.pick(&seen);
                    Step::Operator(rng.below(2) == 0, route, key)
                }
                103..=104 => {
                    let records = self.model.tamperable();
                    if records.is_empty() {
                        continue;
                    }
                    let (route, key, _) = rng.pick(&records);
                    let tamper = rng.pick(&[Tamper::Status, Tamper::RequestHash, Tamper::Header]);
                    Step::Tamper(tamper, route, key)
                }
                105..=107 => Step::Encrypt(self.encryption + 1),
                99..=100 => Step::Rekey,
                101..=102 => Step::Complete(rng.pick(&[
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
            Step::Inspect(route, key) => self.inspect(route, key),
            Step::Operator(release, route, key) => self.operator(release, route, key),
            Step::Encrypt(level) => {
                self.encrypt(level);
                Ok(())
            }
            Step::Rekey => self.rekey(),
            Step::Tamper(tamper, route, key) => self.tamper(tamper, route, key).await,
        }
    }

    /// A database writer alters the sealed record of `key`: from then on it must never replay.
    async fn tamper(&mut self, tamper: Tamper, route: Route, key: u8) -> Result<(), String> {
        let records = self.records.as_ref().expect("a store with records at rest");
        let scoped = self.scoped(route, key);
        match tamper {
            Tamper::Status => records.set_status(&scoped, 299).await,
            Tamper::Header => records.append_header(&scoped, "x-forged", b"1").await,
            Tamper::RequestHash => {
                let (_, _, payload) = self
                    .model
                    .tamperable()
                    .into_iter()
                    .find(|(r, k, _)| (*r, *k) == (route, key))
                    .expect("a tamperable record");
                let hash = |payload| {
                    Op {
                        payload,
                        plan: Plan::Panic,
                        attempt: 0,
                    }
                    .fingerprint()
                    .to_string()
                };
                let stored = records.request_hash(&scoped).await;
                if stored.as_deref() != Some(hash(payload).as_str()) {
                    return Err(format!(
                        "the store holds request hash {stored:?} for payload {payload}, the \
                         model computes {}",
                        hash(payload)
                    ));
                }
                records.set_request_hash(&scoped, &hash(1 - payload)).await;
            }
        }
        self.model.tampered(route, key, tamper);
        Ok(())
    }

    /// The scoped key of `key` on `route`, as the service names it.
    fn scoped(&self, route: Route, key: u8) -> idem::key::ScopedKey {
        let operation = format!("POST {}", route.path());
        idem::key::scoped_key(&operation, &[], &format!("{}-{key}", self.tag)).unwrap()
    }

    /// The key hash the `idem` CLI takes for `key` on `route`.
    fn key_hash(&self, route: Route, key: u8) -> String {
        self.scoped(route, key).hash_hex().to_string()
    }

    /// Runs the `idem` CLI on the store's database, with the key ring in force.
    #[cfg(feature = "cli")]
    fn cli(&self, args: &[&str]) -> std::process::Output {
        let env: Vec<(&str, &str)> = keys(self.encryption)
            .map(|keys| ("IDEM_ENCRYPTION_KEYS", keys))
            .into_iter()
            .collect();
        crate::cli::idem_with(self.cli.as_deref().expect("a SQL store"), args, &env)
    }

    #[cfg(not(feature = "cli"))]
    fn cli(&self, _: &[&str]) -> std::process::Output {
        unreachable!("no CLI events without the `cli` feature")
    }

    /// `idem rekey` (`--unseal` once encryption is switched off): it must succeed, and change
    /// nothing a client sees (the next requests check that).
    fn rekey(&mut self) -> Result<(), String> {
        let out = if seals(self.encryption) {
            self.cli(&["rekey", "--batch", "3", "--accept-plaintext"])
        } else {
            self.cli(&["rekey", "--batch", "3", "--unseal"])
        };
        if !out.status.success() {
            return Err(format!(
                "`idem rekey` failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        self.model.rekeyed(self.encryption);
        Ok(())
    }

    /// `idem inspect --json`: what it shows must be the model's record.
    fn inspect(&mut self, route: Route, key: u8) -> Result<(), String> {
        let hash = self.key_hash(route, key);
        let out = self.cli(&["inspect", "--key-hash", &hash, "--json"]);
        let shown = out.status.success().then(|| {
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let op = json["operation_id"].as_str().unwrap_or_default().to_owned();
            (op, json["fence"].as_u64().unwrap_or_default())
        });
        let expected = self.model.identity(route, key);
        if shown != expected {
            return Err(format!(
                "`idem inspect` shows {shown:?}, the model {expected:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if let Some(seen) = shown {
            self.seen.insert((route, key), seen);
        }
        Ok(())
    }

    /// `idem release` or `idem expire` of the record inspected last: done exactly when the
    /// model says the record is still the one seen.
    fn operator(&mut self, release: bool, route: Route, key: u8) -> Result<(), String> {
        let seen = self.seen[&(route, key)].clone();
        let hash = self.key_hash(route, key);
        let fence = seen.1.to_string();
        let action = if release { "release" } else { "expire" };
        let args = [
            action,
            "--key-hash",
            &hash,
            "--operation-id",
            &seen.0,
            "--fence",
            &fence,
        ];
        let out = self.cli(&args);
        let applies = self.model.operator(release, route, key, &seen);
        if out.status.success() != applies {
            return Err(format!(
                "`idem {action}` of operation {} at fence {fence}: {}, where the model says it \
                 {} ({}{})",
                seen.0,
                if out.status.success() {
                    "done"
                } else {
                    "refused"
                },
                if applies {
                    "applies"
                } else {
                    "no longer applies"
                },
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim(),
            ));
        }
        Ok(())
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
                self.model
                    .started(request, &expect, &op, attempt, self.encryption)?;
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
                self.model
                    .started(request, &expect, &op, attempt, self.encryption)?;
                self.settled(abandons + 1, request.route, "a panicked handler")
                    .await?;
                self.model.abandoned(attempt);
                return Ok(());
            }
            Err(e) => return Err(format!("the request failed: {e}")),
        };
        match self.ran(attempt) {
            Some((run, op)) => {
                self.model
                    .started(request, &expect, &op, attempt, self.encryption)?;
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
        Expect::Expired { run, status } => {
            answer.status == 410
                && !answer.replayed
                && answer.body["biz_no"] == format!("run-{run}")
                && answer.body["response_status"] == *status
        }
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
/// on `site`; returns the steps run and the first violation.
async fn walk(
    site: &Site,
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
    let mut world = World::new(
        site.store.clone(),
        site.clock.clone(),
        tag,
        site.cli.clone(),
        site.records.clone(),
    );
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
    /// Ends the walk: hanging handlers are let go, the faults cleared, and the walk's records
    /// deleted, so that no later walk on the database meets them (a `rekey` would name an
    /// altered one and exit 1).
    async fn end(&mut self) {
        self.faulty.set_down(false);
        self.faulty.set_complete(CompleteFault::None);
        for (_, gate) in self.app.gates.lock().unwrap().drain() {
            let _ = gate.send(200);
        }
        for (_, task) in self.tasks.drain() {
            let _ = task.await;
        }
        // Abandons still in flight land first.
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Some(records) = &self.records {
            for route in Route::ALL {
                for key in 0..2 {
                    records.delete(&self.scoped(route, key)).await;
                }
            }
        }
    }
}

/// Drops steps while the walk still fails: the shortest failing list this finds.
async fn shrink(
    site: &Site,
    seed: u64,
    mut steps: Vec<Step>,
    first: String,
) -> (Vec<Step>, String) {
    let (_, Some(mut error)) = walk(site, seed, 0, Some(&steps)).await else {
        return (
            steps,
            format!("{first}\n(the failure did not repeat: a race?)"),
        );
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
                && let (_, Some(e)) = walk(site, seed, 0, Some(&candidate)).await
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
async fn walks(backend: Backend, site: Site) {
    let first = env_u64("IDEM_MODEL_SEED", 0x1de3_0000 + backend as u64);
    let count = env_u64("IDEM_MODEL_WALKS", 40);
    let length = env_u64("IDEM_MODEL_STEPS", 40) as u32;
    let started = std::time::Instant::now();
    for n in 0..count {
        let seed = first.wrapping_add(n);
        let (steps, error) = walk(&site, seed, length, None).await;
        if let Some(first) = error {
            let (shrunk, error) = shrink(&site, seed, steps, first).await;
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

/// A store the walks run on, on a manual clock, and the database the `idem` CLI reaches.
struct Site {
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
    /// The URL of a SQL store's database, when the CLI is built.
    cli: Option<String>,
    /// Its records at rest (not on the memory store).
    records: Option<Records>,
    /// A temporary directory, or a database of its own, that must live as long as the store.
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// The store of `backend` on a manual clock. The SQL stores are on a database of their own (the
/// walks move the clock by hours and purge what it expires), and their clock starts a day ahead
/// of the database server's, which the CLI reads: what the CLI ends "now" has ended for the
/// store too.
async fn open(backend: Backend) -> Option<Site> {
    let ahead = Timestamp::from_millis(
        Timestamp::from_system_time(std::time::SystemTime::now()).as_millis() + 86_400_000,
    );
    let clock = Arc::new(ManualClock::new(ahead));
    let dyn_clock = clock.clone() as Arc<dyn Clock>;
    let cli = |url: &str| cfg!(feature = "cli").then(|| url.to_owned());
    type Keep = Option<Box<dyn std::any::Any + Send + Sync>>;
    let (store, cli, records, keep): (Arc<dyn Store>, _, _, Keep) = match backend {
        Backend::Memory => {
            let store = MemoryStore::with_clock(dyn_clock);
            (Arc::new(store), None, None, None)
        }
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("idem.db");
            let store = SqliteStore::open(&path)
                .await
                .unwrap()
                .with_clock(dyn_clock);
            let url = format!("sqlite://{}", path.display());
            let records = Records::Sqlite(store.pool().clone());
            (
                Arc::new(store),
                cli(&url),
                Some(records),
                Some(Box::new(dir)),
            )
        }
        Backend::Postgres => {
            let db = backend.database().await?;
            let store = PostgresStore::connect(&db.url)
                .await
                .unwrap()
                .with_clock(dyn_clock);
            let (url, records) = (cli(&db.url), Records::Postgres(store.pool().clone()));
            (Arc::new(store), url, Some(records), Some(Box::new(db)))
        }
        Backend::Mysql => {
            let db = backend.database().await?;
            // The one-statement claim, which tells its own row from another's by key.
            let store = MySqlStore::connect(&db.url)
                .await
                .unwrap()
                .with_one_round_trip_replays()
                .with_clock(dyn_clock);
            let (url, records) = (cli(&db.url), Records::MySql(store.pool().clone()));
            (Arc::new(store), url, Some(records), Some(Box::new(db)))
        }
        Backend::Redis => {
            let fixture = backend.open_with_clock(clock.clone()).await?;
            let records = fixture.records();
            (
                fixture.store.clone(),
                None,
                Some(records),
                Some(Box::new(fixture)),
            )
        }
    };
    store.migrate().await.unwrap();
    Some(Site {
        store,
        clock,
        cli,
        records,
        _keep: keep,
    })
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
    if let Some(site) = open(backend).await {
        walks(backend, site).await;
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
