//! [`Contract`]: what a replay returns. Both the handler's configuration (`config`) and the
//! policy that classifies responses under a contract (`policy`) import it; in `config`, it made
//! the two import each other.

use core::fmt;

/// What a replay returns (S2). Chosen per handler; never mixed up.
///
/// ```
/// use idem_runtime::engine::Contract;
/// assert_eq!(Contract::default(), Contract::ExactReplay);
/// assert_eq!(Contract::LatestState.as_str(), "latest_state");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Contract {
    /// The first response's status, whitelisted headers and body, success or failure alike
    /// (Stripe keeps 500s too). The client must read every stored response as final.
    #[default]
    ExactReplay,
    /// The *current* state of the operation created the first time: a replay calls the
    /// handler's `lookup` with the stored business number and answers `200` with what it
    /// renders. The client must be able to query.
    LatestState,
    /// Only the duplicate execution is blocked: a replay answers `200` with a minimal JSON body
    /// that still carries the business number (`{"<biz_no_field>": "<biz_no>"}`, S11).
    SuppressOnly,
}

impl Contract {
    /// The name used in `#[idempotent(contract = "..")]` and in the documentation.
    ///
    /// ```
    /// use idem_runtime::engine::Contract;
    /// assert_eq!(Contract::SuppressOnly.as_str(), "suppress_only");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Contract::ExactReplay => "exact_replay",
            Contract::LatestState => "latest_state",
            Contract::SuppressOnly => "suppress_only",
        }
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
