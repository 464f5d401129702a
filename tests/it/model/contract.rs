//! The reference model: what a client may observe of one service under the contract (S1-S25),
//! written without looking at how idem stores anything. A pure state machine: [`Contract::send`]
//! says what a request must get, [`Contract::ran`] and the other events move the model on.
//!
//! Its rules, each a line of the contract:
//!
//! * a key with no live record runs the handler under a **new** operation id (S6, S21);
//! * a live record of another payload answers `422` (S7), processing or stored;
//! * a processing record of the same payload answers `409` while its lease runs (S8), and is
//!   taken over under the **same** operation id once the lease has ended (S23);
//! * a stored record of the same payload is replayed (S2) within its TTL; past it, on a route
//!   that remembers keys, it answers `410` with its business number until the remember window
//!   ends, and never runs the handler;
//! * a response the policy calls final is stored; one it calls "never started" deletes the record
//!   only when the attempt created the operation, and otherwise ends the lease and keeps the
//!   operation id, like every other response that is not final (S25);
//! * a result the store refuses ends the lease within a bound (one lease) and keeps the
//!   operation id: the key is never stuck in `409`;
//! * an attempt superseded while it ran answers what a retry of it sees (its own answer when the
//!   record is gone).

use std::collections::HashMap;

use idem::{Contract as Replay, DefaultPolicy, Disposition, OutcomePolicy};

/// A route of the model's service: an operation, its contract and its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `exact_replay`, a 5 min lease (no renewal happens in a walk): handlers may hang, and be
    /// taken over once the store's clock passes it.
    Exact,
    /// `suppress_only`, a 5 min lease.
    Suppress,
    /// `exact_replay`, a 300 ms lease (real time): results the store refuses for a while.
    Short,
    /// `exact_replay`, a 5 min lease, remembered for [`REMEMBER_MS`] past its TTL.
    Remembered,
}

impl Route {
    pub const ALL: [Route; 4] = [
        Route::Exact,
        Route::Suppress,
        Route::Short,
        Route::Remembered,
    ];

    pub fn path(self) -> &'static str {
        match self {
            Route::Exact => "/exact",
            Route::Suppress => "/suppress",
            Route::Short => "/short",
            Route::Remembered => "/remembered",
        }
    }

    /// How long its records live from their claim: the TTL, or the remember window.
    pub fn life_ms(self) -> i64 {
        match self {
            Route::Remembered => REMEMBER_MS,
            _ => TTL_MS,
        }
    }

    pub fn contract(self) -> Replay {
        match self {
            Route::Exact | Route::Short | Route::Remembered => Replay::ExactReplay,
            Route::Suppress => Replay::SuppressOnly,
        }
    }

    /// The lease, in ms of the store's clock (and of real time for the keeper).
    pub fn lease_ms(self) -> i64 {
        match self {
            Route::Exact | Route::Suppress | Route::Remembered => 300_000,
            Route::Short => 300,
        }
    }
}

/// Every route's TTL, in ms.
pub const TTL_MS: i64 = 3_600_000;

/// How long [`Route::Remembered`] remembers a key, from its claim: ten TTLs.
pub const REMEMBER_MS: i64 = 10 * TTL_MS;

/// What a handler does when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Plan {
    /// Returns this status at once.
    Answer(u16),
    /// Panics.
    Panic,
    /// Waits for a `Finish` (or its client hangs up: `Drop`).
    Hang,
}

/// How the store treats a completion (the store's own faults, injected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteFault {
    None,
    /// Refused for the moment, every time (a packet the server drops, a connection reset).
    Transient,
    /// Refused for good (a result the store cannot hold).
    Permanent,
}

/// The key a handle of encryption level `level` seals under: none (`0`), `k1` (`1`), `k2`
/// (`2`, `k1` kept to open), none once switched off (`3`, both keys kept to open).
pub fn seals_under(level: u8) -> Option<u8> {
    match level {
        1 => Some(1),
        2 => Some(2),
        _ => None,
    }
}

/// Whether a handle of encryption level `level` opens what key `key` sealed.
fn opens(level: u8, key: u8) -> bool {
    match level {
        0 => false,
        1 => key == 1,
        _ => true,
    }
}

/// What a database writer changes beside a sealed response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tamper {
    /// The stored status (a 402 to replay as a success, say).
    Status,
    /// The request hash: set to the other payload's, so that that request would get this
    /// response instead of `422`.
    RequestHash,
    /// A header entry added beside the seal marker.
    Header,
}

/// A request: `payload` is what the fingerprint covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    pub route: Route,
    pub key: u8,
    pub payload: u8,
}

/// What a request must get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The handler runs: under a new operation id, or under `Some(this one)`.
    Run { continues: Option<String> },
    /// The stored response of `run`, with `status`.
    Replay { run: u32, status: u16 },
    /// An idempotency answer: `409`, `422`, `503`.
    Reject(u16),
    /// `410 key-expired`: the stored response of `run`, with `status`, expired with the TTL;
    /// the key is remembered.
    Expired { run: u32, status: u16 },
    /// Its own answer (a superseded attempt whose record is gone).
    Own,
}

#[derive(Debug, Clone)]
enum State {
    Processing {
        /// The attempt that holds the lease, if it still runs.
        holder: Option<u32>,
        lease_until: i64,
    },
    Stored {
        run: u32,
        status: u16,
    },
}

#[derive(Debug, Clone)]
struct Rec {
    payload: u8,
    op: String,
    /// 1 for a record claimed where none was, +1 for every later claim of it.
    fence: u64,
    state: State,
    expire_at: i64,
    /// Of a remembered record, when its response stops being replayed.
    replay_until: Option<i64>,
    /// The key its stored response is sealed under.
    sealed_under: Option<u8>,
    /// What a database writer changed of it.
    tampered: Option<Tamper>,
}

/// An attempt whose handler hangs.
#[derive(Debug, Clone)]
pub struct Hanging {
    pub request: Request,
    /// The encryption level of its handle ([`seals_under`]).
    level: u8,
    /// It created the operation (no takeover).
    created: bool,
}

/// The model's state: the store's clock, every key's record, the hanging attempts.
#[derive(Debug, Default, Clone)]
pub struct Contract {
    pub now: i64,
    records: HashMap<(Route, u8), Rec>,
    pub hanging: HashMap<u32, Hanging>,
    /// Every operation id a handler ran under, and the key it belongs to.
    ops: HashMap<String, (Route, u8)>,
}

impl Contract {
    /// No record yet, the store's clock at `now` (ms).
    pub fn at(now: i64) -> Contract {
        Contract {
            now,
            ..Contract::default()
        }
    }

    /// What `request` must get now, the store up.
    pub fn send(&self, request: Request) -> Expect {
        match self.live(request) {
            None => Expect::Run { continues: None },
            // A changed record never replays: the request it was sealed for (or the one its
            // request hash now names) gets 503, any other 422 as before.
            Some(Rec {
                tampered: Some(tamper),
                payload,
                ..
            }) => {
                let forged_for = match tamper {
                    Tamper::RequestHash => 1 - *payload,
                    Tamper::Status | Tamper::Header => *payload,
                };
                Expect::Reject(if request.payload == forged_for {
                    503
                } else {
                    422
                })
            }
            Some(rec) if rec.payload != request.payload => Expect::Reject(422),
            Some(Rec {
                state: State::Stored { run, status },
                replay_until: Some(until),
                ..
            }) if *until <= self.now => Expect::Expired {
                run: *run,
                status: *status,
            },
            Some(Rec {
                state: State::Stored { run, status },
                ..
            }) => Expect::Replay {
                run: *run,
                status: *status,
            },
            Some(Rec {
                state: State::Processing { lease_until, .. },
                op,
                ..
            }) => {
                if *lease_until > self.now {
                    Expect::Reject(409)
                } else {
                    Expect::Run {
                        continues: Some(op.clone()),
                    }
                }
            }
        }
    }

    fn live(&self, request: Request) -> Option<&Rec> {
        self.records
            .get(&(request.route, request.key))
            .filter(|r| r.expire_at > self.now)
    }

    /// Checks that a handler ran under `op` where `expect` said it would, and moves the model
    /// on: the record is processing under the new attempt `attempt`.
    pub fn started(
        &mut self,
        request: Request,
        expect: &Expect,
        op: &str,
        attempt: u32,
        level: u8,
    ) -> Result<(), String> {
        let Expect::Run { continues } = expect else {
            return Err(format!(
                "the handler ran under {op}, where the model expects {expect:?}"
            ));
        };
        match continues {
            Some(same) if same != op => {
                return Err(format!(
                    "a takeover must continue operation {same}, but the handler ran under {op}"
                ));
            }
            None => {
                if let Some(owner) = self.ops.get(op) {
                    return Err(format!(
                        "a new operation must get a new id, but {op} is already that of {owner:?}"
                    ));
                }
            }
            Some(_) => {}
        }
        self.ops.insert(op.to_owned(), (request.route, request.key));
        let key = (request.route, request.key);
        let lease_until = self.now + request.route.lease_ms();
        let fence = self.records.get(&key).map_or(1, |rec| rec.fence + 1);
        let (expire_at, replay_until) = match (continues, self.records.get(&key)) {
            // A takeover keeps the record's windows, at least to the end of the new lease.
            (Some(_), Some(rec)) => (
                rec.expire_at.max(lease_until),
                rec.replay_until.map(|t| t.max(lease_until)),
            ),
            _ => (
                (self.now + request.route.life_ms()).max(lease_until),
                (request.route == Route::Remembered).then_some(self.now + TTL_MS),
            ),
        };
        // An attempt that held the lease before is superseded (fenced out): it still hangs,
        // but no longer holds the record.
        self.records.insert(
            key,
            Rec {
                payload: request.payload,
                op: op.to_owned(),
                fence,
                state: State::Processing {
                    holder: Some(attempt),
                    lease_until,
                },
                expire_at,
                replay_until,
                sealed_under: None,
                tampered: None,
            },
        );
        self.hanging.insert(
            attempt,
            Hanging {
                request,
                level,
                created: continues.is_none(),
            },
        );
        Ok(())
    }

    /// Whether `attempt` still holds its record (nobody took it over, it was not replaced).
    pub fn holds(&self, attempt: u32) -> bool {
        let Some(h) = self.hanging.get(&attempt) else {
            return false;
        };
        matches!(
            self.records.get(&(h.request.route, h.request.key)),
            Some(Rec { state: State::Processing { holder: Some(a), .. }, .. }) if *a == attempt
        )
    }

    /// What a superseded `attempt` answers: what a retry of its request through its handle
    /// sees now, or its own answer when the record is gone (purged, or expired: logically
    /// absent). A stored response its handle cannot open (altered, or sealed under a key its
    /// ring lacks) is `503`, never its own answer, which could contradict the stored one.
    pub fn superseded(&self, attempt: u32) -> Expect {
        let h = &self.hanging[&attempt];
        match self.live(h.request) {
            None => Expect::Own,
            Some(Rec {
                tampered: Some(_), ..
            }) => Expect::Reject(503),
            Some(Rec {
                sealed_under: Some(key),
                state: State::Stored { .. },
                ..
            }) if !opens(h.level, *key) => Expect::Reject(503),
            Some(rec) if rec.payload != h.request.payload => Expect::Reject(422),
            Some(Rec {
                state: State::Stored { run, status },
                replay_until: Some(until),
                ..
            }) if *until <= self.now => Expect::Expired {
                run: *run,
                status: *status,
            },
            Some(Rec {
                state: State::Stored { run, status },
                ..
            }) => Expect::Replay {
                run: *run,
                status: *status,
            },
            Some(_) => Expect::Reject(409),
        }
    }

    /// `attempt`'s handler returned `status` as run `run` and it still holds its record: the
    /// record is settled by the policy, the store faulting `fault`.
    pub fn answered(&mut self, attempt: u32, run: u32, status: u16, fault: CompleteFault) {
        let h = self.hanging.remove(&attempt).expect("a running attempt");
        let key = (h.request.route, h.request.key);
        let disposition = DefaultPolicy.classify(h.request.route.contract(), status);
        match disposition {
            Disposition::Store | Disposition::StoreAsFailure if fault == CompleteFault::None => {
                let rec = self.records.get_mut(&key).expect("a held record");
                rec.state = State::Stored { run, status };
                rec.sealed_under = seals_under(h.level);
            }
            // Only the attempt that created the operation may delete its record (S25).
            Disposition::Release if h.created => {
                self.records.remove(&key);
            }
            // Not final, released after a takeover, or a result the store refused: the lease
            // ends, the operation keeps its id.
            _ => self.ended(key),
        }
    }

    /// `attempt` ended without a result (panic, dropped future): its lease ends if it holds it.
    pub fn abandoned(&mut self, attempt: u32) {
        let holds = self.holds(attempt);
        let h = self.hanging.remove(&attempt).expect("a running attempt");
        if holds {
            self.ended((h.request.route, h.request.key));
        }
    }

    fn ended(&mut self, key: (Route, u8)) {
        let now = self.now;
        if let Some(Rec {
            state:
                State::Processing {
                    holder,
                    lease_until,
                },
            ..
        }) = self.records.get_mut(&key)
        {
            *holder = None;
            *lease_until = (*lease_until).min(now);
        }
    }

    /// The physical delete of every record expired by the store's clock.
    pub fn purged(&mut self) {
        let now = self.now;
        self.records.retain(|_, r| r.expire_at > now);
    }

    /// The live records a database writer may alter in the walks: stored, sealed, not altered
    /// yet, and no attempt of their key still hanging.
    pub fn tamperable(&self) -> Vec<(Route, u8, u8)> {
        let mut keys: Vec<(Route, u8, u8)> = self
            .records
            .iter()
            .filter(|(_, r)| {
                r.expire_at > self.now
                    && r.sealed_under.is_some()
                    && r.tampered.is_none()
                    && matches!(r.state, State::Stored { .. })
            })
            .filter(|((route, key), _)| {
                !self
                    .hanging
                    .values()
                    .any(|h| h.request.route == *route && h.request.key == *key)
            })
            .map(|((route, key), r)| (*route, *key, r.payload))
            .collect();
        keys.sort_unstable_by_key(|(route, key, _)| (route.path(), *key));
        keys
    }

    /// A database writer altered the record of `key`.
    pub fn tampered(&mut self, route: Route, key: u8, tamper: Tamper) {
        let rec = self.records.get_mut(&(route, key)).expect("a record");
        rec.tampered = Some(tamper);
    }

    /// Whether any record (live or not, until purged) was altered: `idem rekey` then names it
    /// and exits 1.
    pub fn any_tampered(&self) -> bool {
        self.records.values().any(|r| r.tampered.is_some())
    }

    /// `idem rekey` with the ring of `level` sealed every stored record under its primary, or
    /// opened every one back to plaintext once encryption is switched off.
    pub fn rekeyed(&mut self, level: u8) {
        for rec in self.records.values_mut() {
            if matches!(rec.state, State::Stored { .. }) {
                rec.sealed_under = seals_under(level);
            }
        }
    }

    /// The keys that have a record (expired or not, until purged), in a stable order.
    pub fn keys(&self) -> Vec<(Route, u8)> {
        let mut keys: Vec<(Route, u8)> = self.records.keys().copied().collect();
        keys.sort_unstable_by_key(|(route, key)| (route.path(), *key));
        keys
    }

    /// The record of `key` as an operator's `inspect` shows it (expired or not, until purged):
    /// its operation id and fence.
    pub fn identity(&self, route: Route, key: u8) -> Option<(String, u64)> {
        self.records
            .get(&(route, key))
            .map(|r| (r.op.clone(), r.fence))
    }

    /// An operator's `release` (`release == true`) or `expire` of the record `seen` in an
    /// earlier `inspect`: whether it applies, and its effect. It applies only to that very
    /// record — the same operation at the same fence — and `release` only while it processes;
    /// the database's clock, behind the store's, makes the lease or the record end now.
    pub fn operator(&mut self, release: bool, route: Route, key: u8, seen: &(String, u64)) -> bool {
        let now = self.now;
        let Some(rec) = self.records.get_mut(&(route, key)) else {
            return false;
        };
        if (&rec.op, rec.fence) != (&seen.0, seen.1) {
            return false;
        }
        match (&mut rec.state, release) {
            (State::Processing { lease_until, .. }, true) => {
                *lease_until = (*lease_until).min(now);
                true
            }
            (_, true) => false,
            (_, false) => {
                rec.expire_at = rec.expire_at.min(now);
                true
            }
        }
    }

    /// Whether a hanging attempt would be taken over by a `Send` now (its lease ran out).
    pub fn any_hanging(&self) -> bool {
        !self.hanging.is_empty()
    }
}
