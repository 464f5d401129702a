//! [`OutcomePolicy`]: which handler responses are final (stored and replayed), which mean "the
//! operation never started" (released, so a corrected retry runs as a new operation), and which
//! are neither (abandoned: a retry continues the same operation under the same operation id).

use core::fmt;

use super::contract::Contract;
use crate::store::Outcome;

/// What happens to a handler's response.
///
/// ```
/// use idem_runtime::engine::Disposition;
/// use idem_runtime::store::Outcome;
/// assert_eq!(Disposition::StoreAsFailure.outcome(), Some(Outcome::FailedStored));
/// assert_eq!(Disposition::Release.outcome(), None);
/// assert_eq!(Disposition::Abandon.outcome(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Final and successful: stored as completed and replayed.
    Store,
    /// Final but a failure (a 500 under `exact_replay`, Stripe's rule): stored as
    /// failed-but-stored and replayed.
    StoreAsFailure,
    /// Not final, and the operation never started — nothing was done, nothing is saved: the
    /// record is deleted so that a corrected retry with the same key runs as a new operation
    /// (S2: "validation failed, nothing saved"). Only for responses that guarantee no side
    /// effect: a retry gets a *new* operation id.
    ///
    /// Only the attempt that created the operation releases it. An attempt that took the
    /// operation over (an earlier attempt's client went away, or its lease ran out) answers for
    /// its own run only, while the earlier one may have done part of the work under the
    /// operation id: its `Release` is carried out as [`Disposition::Abandon`], and the next
    /// retry continues the same operation (S25).
    Release,
    /// Not final, but the operation may have started (a server error under a contract that
    /// stores only successes): the record keeps its operation id, its lease ends at once, and
    /// the next retry takes it over and runs the handler again under the **same** operation id,
    /// so effects keyed on it deduplicate (S22).
    Abandon,
}

impl Disposition {
    /// The store's [`Outcome`], `None` for [`Disposition::Release`].
    ///
    /// ```
    /// use idem_runtime::engine::Disposition;
    /// use idem_runtime::store::Outcome;
    /// assert_eq!(Disposition::Store.outcome(), Some(Outcome::Completed));
    /// ```
    pub const fn outcome(self) -> Option<Outcome> {
        match self {
            Disposition::Store => Some(Outcome::Completed),
            Disposition::StoreAsFailure => Some(Outcome::FailedStored),
            Disposition::Release | Disposition::Abandon => None,
        }
    }
}

/// Classifies a handler's response status under a contract. Set it on the handle with
/// [`Idem::with_policy`](super::Idem::with_policy); the stock one is [`DefaultPolicy`].
///
/// `run_once` classifies a returned `Ok` as status `200` and an `Err` as `500`.
///
/// ```
/// use idem_runtime::engine::{Contract, DefaultPolicy, Disposition, OutcomePolicy};
///
/// /// Our API answers 404 only after doing the work (an idempotent delete): keep it.
/// #[derive(Debug)]
/// struct DeletesAreFinal;
/// impl OutcomePolicy for DeletesAreFinal {
///     fn classify(&self, contract: Contract, status: u16) -> Disposition {
///         if status == 404 { Disposition::Store } else { DefaultPolicy.classify(contract, status) }
///     }
/// }
/// assert_eq!(DeletesAreFinal.classify(Contract::ExactReplay, 404), Disposition::Store);
/// assert_eq!(DeletesAreFinal.classify(Contract::ExactReplay, 400), Disposition::Release);
/// ```
pub trait OutcomePolicy: Send + Sync + fmt::Debug {
    /// What to do with a response of `status` from a handler under `contract`.
    fn classify(&self, contract: Contract, status: u16) -> Disposition;
}

/// The documented default classification:
///
/// | status | `exact_replay` | `latest_state`, `suppress_only` |
/// |---|---|---|
/// | 2xx, 3xx | store | store |
/// | 400, 401, 403, 404, 422 (validation: the operation never started) | release | release |
/// | 408, 409, 425, 429 (transient: try again) | release | release |
/// | other 4xx (the request was refused) | store as failure | release |
/// | 5xx | store as failure (Stripe keeps 500s) | abandon |
/// | 1xx, non-standard codes (not a final response) | store as failure (600-999), abandon | abandon |
///
/// Under `latest_state` and `suppress_only` only successes are stored: a replay of those
/// contracts is built from the business number, which a failure does not have. A `5xx` there
/// may come after part of the work was done, so it is abandoned, not released: the retry runs
/// again under the same operation id (S22) instead of starting a new operation.
///
/// ```
/// use idem_runtime::engine::{Contract::*, DefaultPolicy, Disposition::*, OutcomePolicy};
/// let p = DefaultPolicy;
/// assert_eq!(p.classify(ExactReplay, 201), Store);
/// assert_eq!(p.classify(ExactReplay, 422), Release);
/// assert_eq!(p.classify(ExactReplay, 429), Release);
/// assert_eq!(p.classify(ExactReplay, 402), StoreAsFailure);
/// assert_eq!(p.classify(ExactReplay, 500), StoreAsFailure);
/// assert_eq!(p.classify(SuppressOnly, 500), Abandon);
/// assert_eq!(p.classify(SuppressOnly, 402), Release);
/// assert_eq!(p.classify(LatestState, 200), Store);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultPolicy;

impl OutcomePolicy for DefaultPolicy {
    fn classify(&self, contract: Contract, status: u16) -> Disposition {
        let exact = contract == Contract::ExactReplay;
        match status {
            200..=399 => Disposition::Store,
            // Validation failures: the operation never started (S2).
            400 | 401 | 403 | 404 | 422 => Disposition::Release,
            // Transient: Request Timeout, Conflict, Too Early, Too Many Requests.
            408 | 409 | 425 | 429 => Disposition::Release,
            400..=999 if exact => Disposition::StoreAsFailure,
            // A refusal: the operation did not run.
            400..=499 => Disposition::Release,
            // Server errors under the other contracts, 1xx, non-standard codes: not final, and
            // part of the work may be done: the retry continues the same operation.
            _ => Disposition::Abandon,
        }
    }
}
