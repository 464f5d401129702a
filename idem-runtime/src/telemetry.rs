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
    use super::*;

    pub(crate) fn request(key: &ScopedKey, backend: &'static str, outcome: Outcome) {
        metrics::counter!(
            REQUESTS,
            "operation" => key.shared_operation(),
            "backend" => backend,
            "outcome" => outcome.label(),
        )
        .increment(1);
    }

    pub(crate) fn settled(key: &ScopedKey, backend: &'static str, settled: Settled) {
        metrics::counter!(
            SETTLEMENTS,
            "operation" => key.shared_operation(),
            "backend" => backend,
            "settlement" => settled.label(),
        )
        .increment(1);
    }

    pub(crate) fn completion_retry(key: &ScopedKey, backend: &'static str) {
        metrics::counter!(
            COMPLETION_RETRIES,
            "operation" => key.shared_operation(),
            "backend" => backend,
        )
        .increment(1);
    }

    pub(crate) fn handler(key: &ScopedKey, backend: &'static str, ran: Duration) {
        metrics::histogram!(
            HANDLER_SECONDS,
            "operation" => key.shared_operation(),
            "backend" => backend,
        )
        .record(ran.as_secs_f64());
    }

    pub(crate) fn in_flight(key: &ScopedKey, backend: &'static str, delta: f64) {
        metrics::gauge!(
            IN_FLIGHT,
            "operation" => key.shared_operation(),
            "backend" => backend,
        )
        .increment(delta);
    }

    pub(crate) async fn store_call<T>(
        backend: &'static str,
        statement: &'static str,
        call: impl Future<Output = T>,
    ) -> T {
        let started = std::time::Instant::now();
        let out = call.await;
        metrics::histogram!(STORE_SECONDS, "backend" => backend, "statement" => statement)
            .record(started.elapsed().as_secs_f64());
        out
    }

    pub(crate) fn replay_cache_hit(key: &ScopedKey, backend: &'static str) {
        metrics::counter!(
            REPLAY_CACHE_HITS,
            "operation" => key.shared_operation(),
            "backend" => backend,
        )
        .increment(1);
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
