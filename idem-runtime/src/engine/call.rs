//! What the code `#[idempotent]` generates hands a front: the [`Call`] (the handler's
//! configuration, client key, scope and request hash) and its [`Mode`] (how a replay is built,
//! and whether the result commits in the handler's transaction). Every front takes these two,
//! so a front is one adapter and the macro emits one call whatever the contract.

use std::sync::Arc;

use super::handler_config::HandlerConfig;
use crate::fingerprint::RequestHash;
use crate::key::ScopePart;
use crate::store::atomic::Atomic;

/// One request to a handler: its static configuration, where its client key is, its scope, and
/// its fingerprint — computed **before** the handler runs, so a handler that mutates its input
/// cannot change what was claimed. A front reads `key` and `scope` when it is called; the future
/// it returns borrows neither.
#[derive(Clone, Copy)]
pub struct Call<'a, K> {
    /// The handler's configuration (a `static`).
    pub config: &'static HandlerConfig,
    /// The client key, or where the front finds it (`KeySource` for HTTP).
    pub key: K,
    /// The parts of the key's scope (tenant, user, ...).
    pub scope: &'a [&'a dyn ScopePart],
    /// The request's fingerprint.
    pub hash: RequestHash,
}

/// How a front answers a replay, and whether the handler's result commits in its transaction.
pub struct Mode<R> {
    pub(crate) replay: R,
    pub(crate) atomic: Option<Arc<dyn Atomic>>,
}

/// Replays built from the stored record as the contract says: exactly (`exact_replay`), or
/// as the business number alone (`suppress_only`).
#[derive(Debug, Clone, Copy)]
pub struct Stored;

/// Replays of the current state (`latest_state`): the front calls the lookup with the stored
/// business number and answers what it returns.
#[derive(Debug, Clone, Copy)]
pub struct Latest<L>(pub(crate) L);

impl Mode<Stored> {
    /// Replays of the stored record.
    pub const fn stored() -> Self {
        Mode {
            replay: Stored,
            atomic: None,
        }
    }
}

impl<L> Mode<Latest<L>> {
    /// Replays of the current state, rendered by `lookup(biz_no)`.
    pub const fn latest(lookup: L) -> Self {
        Mode {
            replay: Latest(lookup),
            atomic: None,
        }
    }
}

impl<R> Mode<R> {
    /// The atomic mode: the transaction of `hook`'s slot begins after the claim, and the
    /// result commits in it with the handler's rows.
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    pub fn atomic(self, hook: crate::store::atomic::AtomicMode) -> Self {
        Mode {
            atomic: Some(hook.0),
            ..self
        }
    }
}
