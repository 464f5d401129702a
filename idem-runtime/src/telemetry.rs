//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): what the
//! engine, the stores' callers and the sweeper record. The application installs a recorder
//! (Prometheus, OpenTelemetry, ...); without one every call costs a few atomic loads. The names,
//! labels and meanings are documented in `docs/operations.md`. Labels are the operation and the
//! store's backend, never the key: keys are unbounded and may be personal data.

// Without the feature the names and labels are still checked by the compiler, unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use core::future::Future;
use core::time::Duration;

use crate::key::ScopedKey;

/// `idem_requests_total{operation, backend, outcome}`: how each request with a valid key was
/// answered, by [`Outcome`].
pub(crate) const REQUESTS: &str = "idem_requests_total";
/// `idem_settlements_total{operation, backend, settlement}`: what became of the record of each
/// attempt that ran, by [`Settled`].
pub(crate) const SETTLEMENTS: &str = "idem_settlements_total";
/// `idem_completion_retries_total{operation, backend}`: completions sent again after the store
/// refused them for the moment.
pub(crate) const COMPLETION_RETRIES: &str = "idem_completion_retries_total";
/// `idem_handler_seconds{operation, backend}`: how long handlers ran (to their output, or to
/// their timeout).
pub(crate) const HANDLER_SECONDS: &str = "idem_handler_seconds";
/// `idem_store_seconds{backend, statement}`: how long each store call took as the engine waited
/// for it (pool wait included), errors included.
pub(crate) const STORE_SECONDS: &str = "idem_store_seconds";
/// `idem_in_flight{operation, backend}`: attempts of this process holding a lease right now
/// (processing records it owns).
pub(crate) const IN_FLIGHT: &str = "idem_in_flight";
/// `idem_replay_cache_hits_total{operation, backend}`: replays answered from the handle's replay
/// cache, without a claim (also counted as `replay` in [`REQUESTS`]).
pub(crate) const REPLAY_CACHE_HITS: &str = "idem_replay_cache_hits_total";
/// `idem_purged_total{backend}`: expired records the sweeper deleted.
pub(crate) const PURGED: &str = "idem_purged_total";
/// `idem_records_unopened_total{operation, backend, reason}`: sealed records that did not open
/// (`reason`: `unknown_key`, `tampered`, `malformed`); each is also a `warn` event with its key
/// hash.
pub(crate) const UNOPENED: &str = "idem_records_unopened_total";

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A fresh claim: the handler runs.
    Fresh,
    /// An ended lease taken over: the handler runs under the record's operation id.
    Takeover,
    /// A stored response replayed.
    Replay,
    /// `422`: the key was used for another request.
    KeyReused,
    /// `409`: another attempt holds the lease.
    InProgress,
    /// `503 store-unavailable`: the claim failed; nothing ran.
    Unavailable,
    /// The claim failed and the handler ran unprotected (`fail_open`).
    Unprotected,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Fresh => "fresh",
            Outcome::Takeover => "takeover",
            Outcome::Replay => "replay",
            Outcome::KeyReused => "key_reused",
            Outcome::InProgress => "in_progress",
            Outcome::Unavailable => "unavailable",
            Outcome::Unprotected => "unprotected",
        }
    }
}

/// What became of an attempt's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The result was stored.
    Stored,
    /// The record was released (the operation never started).
    Released,
    /// The lease was ended without a result; the record waits for a retry.
    Abandoned,
    /// The handler ran past its timeout (`503 timed-out`); the lease was ended, the record waits
    /// for a retry.
    TimedOut,
    /// Another attempt took the operation over first: this one's result was refused.
    FencedOut,
    /// The store could not be reached: the record waits for its lease to end.
    Failed,
}

impl Settled {
    fn label(self) -> &'static str {
        match self {
            Settled::Stored => "stored",
            Settled::Released => "released",
            Settled::Abandoned => "abandoned",
            Settled::TimedOut => "timed_out",
            Settled::FencedOut => "fenced_out",
            Settled::Failed => "failed",
        }
    }
}

#[cfg(feature = "metrics")]
mod imp {
    //! Every metric is registered with the recorder in force at the moment (a global one, or a
    //! thread's local one, as `metrics`' own macros do), but under a [`Key`] built once per
    //! thread for each operation and backend: building a key with a run-time label allocates
    //! its labels and hashes them, seven times per fresh request.

    use core::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    use metrics::{Key, Label, Level, Metadata};

    use super::*;

    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    const OUTCOMES: [Outcome; 7] = [
        Outcome::Fresh,
        Outcome::Takeover,
        Outcome::Replay,
        Outcome::KeyReused,
        Outcome::InProgress,
        Outcome::Unavailable,
        Outcome::Unprotected,
    ];

    const SETTLED: [Settled; 6] = [
        Settled::Stored,
        Settled::Released,
        Settled::Abandoned,
        Settled::TimedOut,
        Settled::FencedOut,
        Settled::Failed,
    ];

    /// The keys of one operation's metrics on one backend.
    struct Keys {
        operation: Arc<str>,
        backend: &'static str,
        requests: [Key; OUTCOMES.len()],
        settlements: [Key; SETTLED.len()],
        completion_retries: Key,
        handler: Key,
        in_flight: Key,
        cache_hits: Key,
    }

    impl Keys {
        fn new(operation: Arc<str>, backend: &'static str) -> Keys {
            let key = |name: &'static str, more: Option<(&'static str, &'static str)>| {
                let mut labels = vec![
                    Label::new("operation", Arc::clone(&operation)),
                    Label::from_static_parts("backend", backend),
                ];
                labels.extend(more.map(|(k, v)| Label::from_static_parts(k, v)));
                Key::from_parts(name, labels)
            };
            Keys {
                requests: OUTCOMES.map(|o| key(REQUESTS, Some(("outcome", o.label())))),
                settlements: SETTLED.map(|s| key(SETTLEMENTS, Some(("settlement", s.label())))),
                completion_retries: key(COMPLETION_RETRIES, None),
                handler: key(HANDLER_SECONDS, None),
                in_flight: key(IN_FLIGHT, None),
                cache_hits: key(REPLAY_CACHE_HITS, None),
                operation,
                backend,
            }
        }
    }

    /// At most this many operation and backend pairs keep their keys per thread; past it (a
    /// service with that many operations), keys are built for each metric, as before.
    const MAX_CACHED: usize = 256;

    std::thread_local! {
        static KEYS: RefCell<Vec<Rc<Keys>>> = const { RefCell::new(Vec::new()) };
        static STORE_KEYS: RefCell<Vec<(&'static str, &'static str, Rc<Key>)>> =
            const { RefCell::new(Vec::new()) };
    }

    /// The keys of `key`'s operation on `backend`. Operations are interned by `ScopedKey`, so
    /// the lookup compares pointers first.
    fn keys(key: &ScopedKey, backend: &'static str) -> Rc<Keys> {
        let operation = key.shared_operation();
        let found = KEYS.with_borrow(|all| {
            all.iter()
                .find(|k| {
                    k.backend == backend
                        && (Arc::ptr_eq(&k.operation, &operation) || k.operation == operation)
                })
                .cloned()
        });
        found.unwrap_or_else(|| {
            let keys = Rc::new(Keys::new(operation, backend));
            KEYS.with_borrow_mut(|all| {
                if all.len() < MAX_CACHED {
                    all.push(Rc::clone(&keys));
                }
            });
            keys
        })
    }

    fn index<T: PartialEq>(all: &[T], one: T) -> usize {
        all.iter().position(|x| *x == one).unwrap_or(0)
    }

    pub(crate) fn request(key: &ScopedKey, backend: &'static str, outcome: Outcome) {
        let k = &keys(key, backend).requests[index(&OUTCOMES, outcome)];
        metrics::with_recorder(|r| r.register_counter(k, &METADATA)).increment(1);
    }

    pub(crate) fn settled(key: &ScopedKey, backend: &'static str, settled: Settled) {
        let k = &keys(key, backend).settlements[index(&SETTLED, settled)];
        metrics::with_recorder(|r| r.register_counter(k, &METADATA)).increment(1);
    }

    pub(crate) fn completion_retry(key: &ScopedKey, backend: &'static str) {
        let k = &keys(key, backend).completion_retries;
        metrics::with_recorder(|r| r.register_counter(k, &METADATA)).increment(1);
    }

    pub(crate) fn handler(key: &ScopedKey, backend: &'static str, ran: Duration) {
        let k = &keys(key, backend).handler;
        metrics::with_recorder(|r| r.register_histogram(k, &METADATA)).record(ran.as_secs_f64());
    }

    pub(crate) fn in_flight(key: &ScopedKey, backend: &'static str, delta: f64) {
        let k = &keys(key, backend).in_flight;
        metrics::with_recorder(|r| r.register_gauge(k, &METADATA)).increment(delta);
    }

    /// The key of `idem_store_seconds{backend, statement}`.
    fn store_key(backend: &'static str, statement: &'static str) -> Rc<Key> {
        STORE_KEYS.with_borrow_mut(|all| {
            if let Some((_, _, k)) = all
                .iter()
                .find(|(b, s, _)| *b == backend && *s == statement)
            {
                return Rc::clone(k);
            }
            let k = Rc::new(Key::from_parts(
                STORE_SECONDS,
                vec![
                    Label::from_static_parts("backend", backend),
                    Label::from_static_parts("statement", statement),
                ],
            ));
            if all.len() < MAX_CACHED {
                all.push((backend, statement, Rc::clone(&k)));
            }
            k
        })
    }

    pub(crate) async fn store_call<T>(
        backend: &'static str,
        statement: &'static str,
        call: impl Future<Output = T>,
    ) -> T {
        let started = std::time::Instant::now();
        let out = call.await;
        let k = store_key(backend, statement);
        metrics::with_recorder(|r| r.register_histogram(&k, &METADATA))
            .record(started.elapsed().as_secs_f64());
        out
    }

    pub(crate) fn replay_cache_hit(key: &ScopedKey, backend: &'static str) {
        let k = &keys(key, backend).cache_hits;
        metrics::with_recorder(|r| r.register_counter(k, &METADATA)).increment(1);
    }

    pub(crate) fn purged(backend: &'static str, n: u64) {
        metrics::counter!(PURGED, "backend" => backend).increment(n);
    }

    pub(crate) fn unopened(key: &ScopedKey, backend: &'static str, reason: &'static str) {
        metrics::counter!(
            UNOPENED,
            "operation" => key.shared_operation(),
            "backend" => backend,
            "reason" => reason,
        )
        .increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use super::*;

    pub(crate) fn request(_: &ScopedKey, _: &'static str, _: Outcome) {}
    pub(crate) fn settled(_: &ScopedKey, _: &'static str, _: Settled) {}
    pub(crate) fn completion_retry(_: &ScopedKey, _: &'static str) {}
    pub(crate) fn handler(_: &ScopedKey, _: &'static str, _: Duration) {}
    pub(crate) fn in_flight(_: &ScopedKey, _: &'static str, _: f64) {}
    pub(crate) async fn store_call<T>(
        _: &'static str,
        _: &'static str,
        call: impl Future<Output = T>,
    ) -> T {
        call.await
    }
    pub(crate) fn replay_cache_hit(_: &ScopedKey, _: &'static str) {}
    pub(crate) fn purged(_: &'static str, _: u64) {}
    pub(crate) fn unopened(_: &ScopedKey, _: &'static str, _: &'static str) {}
}

pub(crate) use imp::*;
