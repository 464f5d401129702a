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
/// `idem_waits_total{operation, backend, outcome}`: duplicates that found the first attempt in
/// flight with a `wait`, by how their wait ended ([`Waited`]).
pub(crate) const WAITS: &str = "idem_waits_total";
/// `idem_waiting{operation, backend}`: duplicates of this process waiting right now.
pub(crate) const WAITING: &str = "idem_waiting";
/// `idem_purged_total{backend, phase}`: what the sweeper purged: `records` deleted past their
/// end, `responses` of remembered records freed past their TTL.
pub(crate) const PURGED: &str = "idem_purged_total";
/// `idem_records_unopened_total{operation, backend, reason}`: sealed records that did not open
/// (`reason`: `unknown_key`, `tampered`, `malformed`); each is also a `warn` event with its key
/// hash.
pub(crate) const UNOPENED: &str = "idem_records_unopened_total";

/// A fieldless enum of a metric's label values, its `label()`, and `ALL`: every variant in
/// declaration order, so that `variant as usize` is its index there. One list makes all three:
/// a new variant cannot be left out of the metrics' tables.
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident => $label:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every variant, in declaration order.
            const ALL: &'static [$name] = &[$($name::$variant),*];

            fn label(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)*
                }
            }
        }
    };
}

label_values! {
    /// How a request was answered.
    enum Outcome {
        /// A fresh claim: the handler runs.
        Fresh => "fresh",
        /// An ended lease taken over: the handler runs under the record's operation id.
        Takeover => "takeover",
        /// A stored response replayed.
        Replay => "replay",
        /// `422`: the key was used for another request.
        KeyReused => "key_reused",
        /// `409`: another attempt holds the lease.
        InProgress => "in_progress",
        /// `410`: the key is remembered past its TTL (`remember`); nothing ran.
        KeyExpired => "key_expired",
        /// `503 store-unavailable`: the claim failed; nothing ran.
        Unavailable => "unavailable",
        /// The claim failed and the handler ran unprotected (`fail_open`).
        Unprotected => "unprotected",
    }
}

label_values! {
    /// How the wait of a duplicate for the attempt in flight ended.
    enum Waited {
        /// The attempt ended within the bound: the duplicate was admitted again (a replay,
        /// most often).
        Answered => "answered",
        /// The bound passed first: `409`.
        TimedOut => "timed_out",
        /// The handle had its most waiters: `409` at once.
        OverCap => "over_cap",
        /// The request was dropped mid-wait (its client hung up).
        Left => "left",
    }
}

label_values! {
    /// What became of an attempt's record.
    enum Settled {
        /// The result was stored.
        Stored => "stored",
        /// The record was released (the operation never started).
        Released => "released",
        /// The lease was ended without a result; the record waits for a retry.
        Abandoned => "abandoned",
        /// The handler ran past its timeout (`503 timed-out`); the lease was ended, the record
        /// waits for a retry.
        TimedOut => "timed_out",
        /// Another attempt took the operation over first: this one's result was refused.
        FencedOut => "fenced_out",
        /// The store could not be reached: the record waits for its lease to end.
        Failed => "failed",
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

    /// The keys of one operation's metrics on one backend.
    struct Keys {
        operation: Arc<str>,
        backend: &'static str,
        requests: [Key; Outcome::ALL.len()],
        settlements: [Key; Settled::ALL.len()],
        completion_retries: Key,
        handler: Key,
        in_flight: Key,
        cache_hits: Key,
        waits: [Key; Waited::ALL.len()],
        waiting: Key,
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
                requests: core::array::from_fn(|i| {
                    key(REQUESTS, Some(("outcome", Outcome::ALL[i].label())))
                }),
                settlements: core::array::from_fn(|i| {
                    key(SETTLEMENTS, Some(("settlement", Settled::ALL[i].label())))
                }),
                completion_retries: key(COMPLETION_RETRIES, None),
                handler: key(HANDLER_SECONDS, None),
                in_flight: key(IN_FLIGHT, None),
                cache_hits: key(REPLAY_CACHE_HITS, None),
                waits: core::array::from_fn(|i| {
                    key(WAITS, Some(("outcome", Waited::ALL[i].label())))
                }),
                waiting: key(WAITING, None),
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

    pub(crate) fn request(key: &ScopedKey, backend: &'static str, outcome: Outcome) {
        let k = &keys(key, backend).requests[outcome as usize];
        metrics::with_recorder(|r| r.register_counter(k, &METADATA)).increment(1);
    }

    pub(crate) fn settled(key: &ScopedKey, backend: &'static str, settled: Settled) {
        let k = &keys(key, backend).settlements[settled as usize];
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

    pub(crate) fn waited(key: &ScopedKey, backend: &'static str, waited: Waited) {
        let k = &keys(key, backend).waits[waited as usize];
        metrics::with_recorder(|r| r.register_counter(k, &METADATA)).increment(1);
    }

    pub(crate) fn waiting(key: &ScopedKey, backend: &'static str, delta: f64) {
        let k = &keys(key, backend).waiting;
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

    pub(crate) fn purged(backend: &'static str, phase: &'static str, n: u64) {
        metrics::counter!(PURGED, "backend" => backend, "phase" => phase).increment(n);
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
    pub(crate) fn waited(_: &ScopedKey, _: &'static str, _: Waited) {}
    pub(crate) fn waiting(_: &ScopedKey, _: &'static str, _: f64) {}
    pub(crate) async fn store_call<T>(
        _: &'static str,
        _: &'static str,
        call: impl Future<Output = T>,
    ) -> T {
        call.await
    }
    pub(crate) fn replay_cache_hit(_: &ScopedKey, _: &'static str) {}
    pub(crate) fn purged(_: &'static str, _: &'static str, _: u64) {}
    pub(crate) fn unopened(_: &ScopedKey, _: &'static str, _: &'static str) {}
}

pub(crate) use imp::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_value_is_listed_at_its_own_index() {
        fn check<T: Copy + PartialEq + core::fmt::Debug>(
            all: &[T],
            index: impl Fn(T) -> usize,
            label: impl Fn(T) -> &'static str,
        ) {
            let mut labels = Vec::new();
            for (i, &v) in all.iter().enumerate() {
                assert_eq!(index(v), i, "{v:?}");
                labels.push(label(v));
            }
            let n = labels.len();
            labels.sort_unstable();
            labels.dedup();
            assert_eq!(labels.len(), n, "two variants share a label");
        }
        check(Outcome::ALL, |o| o as usize, Outcome::label);
        check(Settled::ALL, |s| s as usize, Settled::label);
        assert_eq!(Outcome::ALL.len(), 8);
        assert_eq!(Outcome::Unprotected.label(), "unprotected");
        assert_eq!(Settled::FencedOut.label(), "fenced_out");
    }
}
