//! [`Contract`], [`HandlerConfig`], the [`Idem`] handle and [`AsIdem`].

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use super::policy::{DefaultPolicy, OutcomePolicy};
use crate::store::Store;

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

/// Everything `#[idempotent]` fixes at compile time for one handler; generated as a `static`.
///
/// The fields are public so that generated code can build it as a literal; the `const` builder
/// methods serve hand-written code.
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::engine::{Contract, HandlerConfig};
///
/// static CREATE_PAYMENT: HandlerConfig = HandlerConfig::new("payments::create")
///     .ttl(Duration::from_secs(90 * 86_400))
///     .lease(Duration::from_secs(10))
///     .contract(Contract::ExactReplay)
///     .replay_headers(&["x-request-cost"]);
/// assert_eq!(CREATE_PAYMENT.lease, Duration::from_secs(10));
/// assert!(!CREATE_PAYMENT.fail_open);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerConfig {
    /// Names the operation inside the scoped key (`tenant:user:operation:client_key`); the
    /// attribute's default is `module_path!() + "::" + fn name`. Two handlers with different
    /// operations never share a record, even under the same client key.
    pub operation: &'static str,
    /// How long the guarantee lasts, counted from the claim (S19): after it a reuse of the key is
    /// a new request.
    pub ttl: Duration,
    /// How long the handler may run before a retry may take the record over (S23). The engine
    /// extends it in the background every `lease / 2` while the handler runs.
    pub lease: Duration,
    /// What a replay returns.
    pub contract: Contract,
    /// Response headers kept in the snapshot besides `content-type` and `location` (lowercase
    /// names). `set-cookie`, `authorization`, `proxy-authenticate`, `www-authenticate`,
    /// `proxy-authorization` and hop-by-hop headers are never kept, even if listed.
    pub replay_headers: &'static [&'static str],
    /// When the store is unavailable: `false` (the default) answers `503` + `Retry-After` and
    /// does not run the handler (fail closed); `true` runs the handler **without** protection
    /// and marks the response `Idempotency-Status: unprotected`.
    pub fail_open: bool,
    /// Largest response body stored whole; `None` takes the [`Idem`] handle's default
    /// ([`DEFAULT_MAX_SNAPSHOT_BYTES`] unless changed).
    pub max_snapshot_bytes: Option<usize>,
}

impl HandlerConfig {
    /// Defaults: a TTL of 7 days (ordinary writes, contract S20; the same default as
    /// `#[idempotent]`), a lease of 30 seconds, [`Contract::ExactReplay`], no extra
    /// headers, fail closed, the handle's snapshot size.
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::HandlerConfig;
    /// const C: HandlerConfig = HandlerConfig::new("op");
    /// assert_eq!(C.ttl, Duration::from_secs(7 * 86_400));
    /// assert_eq!(C.lease, Duration::from_secs(30));
    /// ```
    pub const fn new(operation: &'static str) -> Self {
        HandlerConfig {
            operation,
            ttl: Duration::from_secs(7 * 86_400),
            lease: Duration::from_secs(30),
            contract: Contract::ExactReplay,
            replay_headers: &[],
            fail_open: false,
            max_snapshot_bytes: None,
        }
    }

    /// Sets [`HandlerConfig::ttl`].
    ///
    /// ```
    /// # use core::time::Duration;
    /// # use idem_runtime::engine::HandlerConfig;
    /// assert_eq!(HandlerConfig::new("op").ttl(Duration::from_secs(60)).ttl, Duration::from_secs(60));
    /// ```
    #[must_use]
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets [`HandlerConfig::lease`].
    ///
    /// ```
    /// # use core::time::Duration;
    /// # use idem_runtime::engine::HandlerConfig;
    /// assert_eq!(HandlerConfig::new("op").lease(Duration::from_secs(5)).lease, Duration::from_secs(5));
    /// ```
    #[must_use]
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`HandlerConfig::contract`].
    ///
    /// ```
    /// # use idem_runtime::engine::{Contract, HandlerConfig};
    /// let c = HandlerConfig::new("op").contract(Contract::SuppressOnly);
    /// assert_eq!(c.contract, Contract::SuppressOnly);
    /// ```
    #[must_use]
    pub const fn contract(mut self, contract: Contract) -> Self {
        self.contract = contract;
        self
    }

    /// Sets [`HandlerConfig::replay_headers`].
    ///
    /// ```
    /// # use idem_runtime::engine::HandlerConfig;
    /// let c = HandlerConfig::new("op").replay_headers(&["x-balance"]);
    /// assert_eq!(c.replay_headers, ["x-balance"]);
    /// ```
    #[must_use]
    pub const fn replay_headers(mut self, headers: &'static [&'static str]) -> Self {
        self.replay_headers = headers;
        self
    }

    /// Sets [`HandlerConfig::fail_open`].
    ///
    /// ```
    /// # use idem_runtime::engine::HandlerConfig;
    /// assert!(HandlerConfig::new("op").fail_open(true).fail_open);
    /// ```
    #[must_use]
    pub const fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// Sets [`HandlerConfig::max_snapshot_bytes`].
    ///
    /// ```
    /// # use idem_runtime::engine::HandlerConfig;
    /// assert_eq!(HandlerConfig::new("op").max_snapshot_bytes(1024).max_snapshot_bytes, Some(1024));
    /// ```
    #[must_use]
    pub const fn max_snapshot_bytes(mut self, bytes: usize) -> Self {
        self.max_snapshot_bytes = Some(bytes);
        self
    }
}

/// Default of [`Idem::max_snapshot_bytes`]: 256 KiB.
pub const DEFAULT_MAX_SNAPSHOT_BYTES: usize = 256 * 1024;

/// The store plus the defaults every idempotent handler shares. Cheap to clone (two `Arc`s).
///
/// Put it in the axum state (`impl FromRef<AppState> for Idem`), or pass it to
/// `#[idempotent(store = ..)]` / [`run_once`](super::run_once).
///
/// ```
/// use idem_runtime::engine::{DefaultPolicy, Idem};
/// use idem_runtime::store::MemoryStore;
/// let idem = Idem::new(MemoryStore::new())
///     .with_policy(DefaultPolicy)
///     .max_snapshot_bytes(64 * 1024);
/// assert_eq!(idem.snapshot_limit(), 64 * 1024);
/// let shared = idem.clone(); // same store
/// assert!(std::sync::Arc::ptr_eq(shared.store(), idem.store()));
/// ```
#[derive(Clone)]
pub struct Idem {
    store: Arc<dyn Store>,
    policy: Arc<dyn OutcomePolicy>,
    max_snapshot_bytes: usize,
}

impl fmt::Debug for Idem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idem")
            .field("store", &self.store)
            .field("policy", &self.policy)
            .field("max_snapshot_bytes", &self.max_snapshot_bytes)
            .finish()
    }
}

impl Idem {
    /// A handle over `store` with the [`DefaultPolicy`] and 256 KiB snapshots.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// # let _ = idem;
    /// ```
    pub fn new(store: impl Store + 'static) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// A handle over a store that is already shared.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idem_runtime::engine::Idem;
    /// use idem_runtime::store::{MemoryStore, Store};
    /// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    /// let idem = Idem::from_arc(store.clone());
    /// assert!(Arc::ptr_eq(idem.store(), &store));
    /// ```
    pub fn from_arc(store: Arc<dyn Store>) -> Self {
        Idem {
            store,
            policy: Arc::new(DefaultPolicy),
            max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
        }
    }

    /// Replaces the [`OutcomePolicy`] that decides which responses are stored.
    ///
    /// ```
    /// use idem_runtime::engine::{Contract, DefaultPolicy, Disposition, Idem, OutcomePolicy};
    /// #[derive(Debug)]
    /// struct NeverKeep404;
    /// impl OutcomePolicy for NeverKeep404 {
    ///     fn classify(&self, contract: Contract, status: u16) -> Disposition {
    ///         match status {
    ///             409 => Disposition::Store, // our 409 means "already done": final
    ///             _ => DefaultPolicy.classify(contract, status),
    ///         }
    ///     }
    /// }
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new()).with_policy(NeverKeep404);
    /// assert_eq!(idem.policy().classify(Contract::ExactReplay, 409), Disposition::Store);
    /// ```
    #[must_use]
    pub fn with_policy(mut self, policy: impl OutcomePolicy + 'static) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// Sets the default largest body stored whole (see [`HandlerConfig::max_snapshot_bytes`]).
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new()).max_snapshot_bytes(1024);
    /// assert_eq!(idem.snapshot_limit(), 1024);
    /// ```
    #[must_use]
    pub fn max_snapshot_bytes(mut self, n: usize) -> Self {
        self.max_snapshot_bytes = n;
        self
    }

    /// The store.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// let _store: &std::sync::Arc<dyn idem_runtime::store::Store> = idem.store();
    /// ```
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The outcome policy.
    ///
    /// ```
    /// use idem_runtime::engine::{Contract, Disposition, Idem};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// assert_eq!(idem.policy().classify(Contract::ExactReplay, 201), Disposition::Store);
    /// ```
    pub fn policy(&self) -> &dyn OutcomePolicy {
        &*self.policy
    }

    /// The default largest body stored whole.
    ///
    /// ```
    /// use idem_runtime::engine::{DEFAULT_MAX_SNAPSHOT_BYTES, Idem};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// assert_eq!(idem.snapshot_limit(), DEFAULT_MAX_SNAPSHOT_BYTES);
    /// ```
    pub fn snapshot_limit(&self) -> usize {
        self.max_snapshot_bytes
    }
}

/// Anything that yields the [`Idem`] handle, for `#[idempotent(store = expr)]` and
/// [`run_once`](super::run_once)-style code: implemented for `Idem`, references to it, `Arc<Idem>`
/// and `Box<Idem>`.
///
/// ```
/// use std::sync::Arc;
/// use idem_runtime::engine::{AsIdem, Idem};
/// let idem = Arc::new(Idem::new(idem_runtime::store::MemoryStore::new()));
/// fn limit(h: &impl AsIdem) -> usize { h.as_idem().snapshot_limit() }
/// assert_eq!(limit(&idem), limit(&&*idem));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idem handle",
    note = "pass an `idem::Idem` (or a reference, `Arc` or `Box` of one) to `store = ..`; build it with `Idem::new(store)`"
)]
pub trait AsIdem {
    /// The handle.
    fn as_idem(&self) -> &Idem;
}

impl AsIdem for Idem {
    fn as_idem(&self) -> &Idem {
        self
    }
}

impl<T: AsIdem + ?Sized> AsIdem for &T {
    fn as_idem(&self) -> &Idem {
        (**self).as_idem()
    }
}

impl<T: AsIdem + ?Sized> AsIdem for Arc<T> {
    fn as_idem(&self) -> &Idem {
        (**self).as_idem()
    }
}

impl<T: AsIdem + ?Sized> AsIdem for Box<T> {
    fn as_idem(&self) -> &Idem {
        (**self).as_idem()
    }
}
