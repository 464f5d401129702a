//! [`OutcomePolicy`]: which handler responses are final (stored and replayed) and which mean
//! "the operation never started" (released, so a corrected retry runs).

use core::fmt;

use super::config::Contract;
use crate::store::Outcome;

/// What happens to a handler's response.
///
/// ```
/// use idem_runtime::engine::Disposition;
/// use idem_runtime::store::Outcome;
/// assert_eq!(Disposition::StoreAsFailure.outcome(), Some(Outcome::FailedStored));
/// assert_eq!(Disposition::Release.outcome(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Final and successful: stored as completed and replayed.
    Store,
    /// Final but a failure (a 500 under `exact_replay`, Stripe's rule): stored as
    /// failed-but-stored and replayed.
    StoreAsFailure,
    /// Not final, nothing saved: the claim is released so that a retry with the same key runs
    /// (S2: "validation failed, nothing saved").
    Release,
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
            Disposition::Release => None,
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
/// | other 4xx | store as failure | release |
/// | 5xx | store as failure (Stripe keeps 500s) | release |
/// | 1xx (not a final response) | release | release |
///
/// Under `latest_state` and `suppress_only` only successes are stored: a replay of those
/// contracts is built from the business number, which a failure does not have.
///
/// ```
/// use idem_runtime::engine::{Contract::*, DefaultPolicy, Disposition::*, OutcomePolicy};
/// let p = DefaultPolicy;
/// assert_eq!(p.classify(ExactReplay, 201), Store);
/// assert_eq!(p.classify(ExactReplay, 422), Release);
/// assert_eq!(p.classify(ExactReplay, 429), Release);
/// assert_eq!(p.classify(ExactReplay, 402), StoreAsFailure);
/// assert_eq!(p.classify(ExactReplay, 500), StoreAsFailure);
/// assert_eq!(p.classify(SuppressOnly, 500), Release);
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
            400..=599 if exact => Disposition::StoreAsFailure,
            // Anything else (1xx, non-standard codes >= 600 unless exact_replay, failures under
            // the other contracts) is not final.
            600..=999 if exact => Disposition::StoreAsFailure,
            _ => Disposition::Release,
        }
    }
}
