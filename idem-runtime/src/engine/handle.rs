//! The [`Idem`] handle (the store plus the defaults every idempotent handler shares) and
//! [`AsIdem`], anything that yields one.

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use super::error::IdempotencyError;
use super::policy::{DefaultPolicy, OutcomePolicy};
use super::replay_cache::ReplayCache;
use super::wait::Waiters;
use crate::seal::KeyRing;
use crate::store::Store;

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
///     .with_max_snapshot_bytes(64 * 1024);
/// assert_eq!(idem.max_snapshot_bytes(), 64 * 1024);
/// let shared = idem.clone(); // same store
/// assert!(std::sync::Arc::ptr_eq(shared.store(), idem.store()));
/// ```
#[derive(Clone)]
pub struct Idem {
    // One reference count per handle: a request clones the handle (into its context) and drops
    // it, from every worker thread at once.
    inner: Arc<Inner>,
}

/// What a handle holds; shared by its clones, copied on the first change after a clone.
#[derive(Clone)]
struct Inner {
    store: Arc<dyn Store>,
    policy: Arc<dyn OutcomePolicy>,
    max_snapshot_bytes: usize,
    store_timeout: Duration,
    problem_base: Option<Arc<str>>,
    replay_cache: Option<ReplayCache>,
    key_ring: Option<Arc<KeyRing>>,
    /// The duplicates waiting for an attempt of this handle ([`HandlerConfig::wait`]).
    ///
    /// [`HandlerConfig::wait`]: super::HandlerConfig::wait
    waiters: Arc<Waiters>,
    #[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
    default_scope: Option<Arc<DefaultScopeFn>>,
}

/// The router-wide default scope of [`Idem::with_default_scope`]: the scope parts of a request,
/// from its head (typically an authentication extension), or `None` when the request carries no
/// identity to scope by.
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "axum", feature = "actix", feature = "tonic")))
)]
pub type DefaultScopeFn = dyn Fn(&http::request::Parts) -> Option<Vec<String>> + Send + Sync;

impl fmt::Debug for Idem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Idem");
        d.field("store", &self.inner.store)
            .field("policy", &self.inner.policy)
            .field("max_snapshot_bytes", &self.inner.max_snapshot_bytes)
            .field("store_timeout", &self.inner.store_timeout)
            .field("problem_base", &self.inner.problem_base)
            .field("replay_cache", &self.inner.replay_cache)
            .field("key_ring", &self.inner.key_ring)
            .field("max_waiters", &self.inner.waiters.cap());
        #[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
        d.field("default_scope", &self.inner.default_scope.is_some());
        d.finish()
    }
}

impl Idem {
    /// The longest wait for one answer of the store unless [`Idem::store_timeout`] says
    /// otherwise: 2 seconds.
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(2);
    /// The largest response body stored whole unless [`Idem::with_max_snapshot_bytes`] says
    /// otherwise: 256 KiB.
    pub const DEFAULT_MAX_SNAPSHOT_BYTES: usize = 256 * 1024;
    /// The most duplicates that wait at once for attempts of a handle unless
    /// [`Idem::with_max_waiters`] says otherwise: 4096.
    pub const DEFAULT_MAX_WAITERS: usize = 4096;

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
            inner: Arc::new(Inner {
                store,
                policy: Arc::new(DefaultPolicy),
                max_snapshot_bytes: Self::DEFAULT_MAX_SNAPSHOT_BYTES,
                store_timeout: Self::DEFAULT_STORE_TIMEOUT,
                problem_base: None,
                replay_cache: None,
                key_ring: None,
                waiters: Arc::new(Waiters::new(Self::DEFAULT_MAX_WAITERS)),
                #[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
                default_scope: None,
            }),
        }
    }

    fn settings(&mut self) -> &mut Inner {
        Arc::make_mut(&mut self.inner)
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
        self.settings().policy = Arc::new(policy);
        self
    }

    /// Sets how long the engine waits for one answer of the store (a claim, a completion, a lease
    /// renewal) before it counts the store as unavailable: [`Idem::DEFAULT_STORE_TIMEOUT`], 2 s, unless
    /// set. This bounds what an outage costs a request — a server stopped, restarting, failing
    /// over, or a network that stalls without closing connections: the claim is answered
    /// `503 store-unavailable` + `Retry-After` after at most this long, and a request whose
    /// handler already ran gets its answer after at most one more such wait while its result is
    /// stored in the background (its lease held, so that retries wait with `409`).
    ///
    /// A claim cut off by the timeout may still have been committed: its record then waits for
    /// its lease to run out, and the retry takes it over under the same operation id.
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new())
    ///     .with_store_timeout(Duration::from_millis(500));
    /// assert_eq!(idem.store_timeout(), Duration::from_millis(500));
    /// ```
    #[must_use]
    pub fn with_store_timeout(mut self, timeout: Duration) -> Self {
        self.settings().store_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How long the engine waits for one answer of the store: what [`Idem::with_store_timeout`] set,
    /// or [`Idem::DEFAULT_STORE_TIMEOUT`].
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// assert_eq!(idem.store_timeout(), Idem::DEFAULT_STORE_TIMEOUT);
    /// ```
    pub fn store_timeout(&self) -> Duration {
        self.inner.store_timeout
    }

    /// Sets the default largest body stored whole (see
    /// [`HandlerConfig::max_snapshot_bytes`](super::HandlerConfig::max_snapshot_bytes)).
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new()).with_max_snapshot_bytes(1024);
    /// assert_eq!(idem.max_snapshot_bytes(), 1024);
    /// ```
    #[must_use]
    pub fn with_max_snapshot_bytes(mut self, n: usize) -> Self {
        self.settings().max_snapshot_bytes = n;
        self
    }

    /// Sets the base of the `type` URIs of the problem documents idem sends through this handle:
    /// `base` followed by the type's slug (`key-reused`, `in-progress`, ...; the list is in
    /// [`problem`](super::problem)), for a service that documents its errors itself. Without
    /// it, types are under [`problem::DEFAULT_BASE`](super::problem::DEFAULT_BASE), idem's own
    /// documentation of each type.
    ///
    /// It applies to the attribute's handlers, the tower layer, and the rejections of
    /// `idem::axum::Json` on the routes of either (the handle puts the base into the request's
    /// extensions before the body is read).
    ///
    /// ```
    /// use idem_runtime::engine::{Idem, IdempotencyError};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new())
    ///     .with_problem_base("https://api.example.com/problems/");
    /// let p = idem.problem(&IdempotencyError::Unscoped, None);
    /// assert_eq!(p.get("type").unwrap(), "https://api.example.com/problems/unscoped");
    /// ```
    #[must_use]
    pub fn with_problem_base(mut self, base: impl Into<Arc<str>>) -> Self {
        self.settings().problem_base = Some(base.into());
        self
    }

    /// The base set with [`Idem::with_problem_base`], if any.
    pub fn problem_base(&self) -> Option<&Arc<str>> {
        self.inner.problem_base.as_ref()
    }

    /// Keeps the completed records this handle sees (claims that find one, results it stores) in
    /// `cache`, and replays a retry of the same request from it without a store call, for as
    /// long as the cache's bounds allow (see [`ReplayCache`]): never past the record's expiry
    /// minus the cache's clock margin, never longer than its `max_age` after it was filled (an
    /// operator's `idem expire` goes unseen by this process for at most that long). Off unless
    /// set. Handles given the same cache (or clones of one) share its entries.
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::{Idem, ReplayCache};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new())
    ///     .with_replay_cache(ReplayCache::new(10_000).max_age(Duration::from_secs(1)));
    /// assert_eq!(idem.replay_cache().unwrap().max_age_in_force(), Duration::from_secs(1));
    /// ```
    #[must_use]
    pub fn with_replay_cache(mut self, cache: ReplayCache) -> Self {
        self.settings().replay_cache = Some(cache);
        self
    }

    /// Seals every stored response (its headers, body and business number) under `ring`'s
    /// primary key, and opens stored responses with any of its keys: nothing of a response, nor
    /// the tenant, user or client key of a record, is readable in the store
    /// ([`seal`](crate::seal)). Records written before stay readable and replay as they are.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// use idem_runtime::seal::KeyRing;
    /// let ring = KeyRing::parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")?;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new()).with_encryption(ring);
    /// assert_eq!(idem.key_ring().unwrap().primary(), "k1");
    /// # Ok::<(), idem_runtime::seal::KeyRingError>(())
    /// ```
    #[must_use]
    pub fn with_encryption(mut self, ring: KeyRing) -> Self {
        self.settings().key_ring = Some(Arc::new(ring));
        self
    }

    /// The key ring set with [`Idem::with_encryption`], if any.
    pub fn key_ring(&self) -> Option<&KeyRing> {
        self.inner.key_ring.as_deref()
    }

    pub(crate) fn shared_key_ring(&self) -> Option<Arc<KeyRing>> {
        self.inner.key_ring.clone()
    }

    /// Caps the duplicates that wait at once for the attempts of this handle and its clones
    /// ([`HandlerConfig::wait`]); one over the cap is answered `409` + `Retry-After` at once.
    /// [`Idem::DEFAULT_MAX_WAITERS`] (4096) unless set. A waiter holds a request open and
    /// claims again at most every 250 ms: the cap bounds both.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new()).with_max_waiters(100);
    /// assert_eq!(idem.max_waiters(), 100);
    /// ```
    ///
    /// [`HandlerConfig::wait`]: super::HandlerConfig::wait
    #[must_use]
    pub fn with_max_waiters(mut self, max: usize) -> Self {
        self.settings().waiters = Arc::new(Waiters::new(max));
        self
    }

    /// The most duplicates that wait at once ([`Idem::with_max_waiters`]).
    pub fn max_waiters(&self) -> usize {
        self.inner.waiters.cap()
    }

    /// The duplicates waiting now for an attempt of this handle.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// assert_eq!(Idem::new(idem_runtime::store::MemoryStore::new()).waiting(), 0);
    /// ```
    pub fn waiting(&self) -> usize {
        self.inner.waiters.waiting()
    }

    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.inner.waiters
    }

    /// The cache set with [`Idem::with_replay_cache`], if any.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// assert!(Idem::new(idem_runtime::store::MemoryStore::new()).replay_cache().is_none());
    /// ```
    pub fn replay_cache(&self) -> Option<&ReplayCache> {
        self.inner.replay_cache.as_ref()
    }

    /// The problem document of `error` as this handle sends it (its base applied);
    /// `idempotency_key` is echoed when given.
    pub fn problem(
        &self,
        error: &IdempotencyError,
        idempotency_key: Option<&str>,
    ) -> super::problem::Problem {
        error
            .problem(idempotency_key)
            .rebase_onto(self.inner.problem_base.as_deref())
    }

    /// Sets the router-wide default scope: the scope of every handler that says `scope = default`
    /// (`#[idempotent]`) and of every [`IdempotencyLayer`](crate::axum::IdempotencyLayer) without
    /// a scope of its own, computed from the request's head — typically the identity an
    /// authentication middleware put into the request's extensions. A request for which it
    /// returns `None` (no identity) is refused with `401 unscoped`, never run under a key shared
    /// with other callers.
    ///
    /// Take the scope from an authenticated identity. A client-supplied header
    /// (`X-Tenant-Id`) is only acceptable behind a gateway that sets it itself: otherwise any
    /// client can name another tenant and be answered with that tenant's stored responses.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    ///
    /// #[derive(Clone)]
    /// struct Caller { tenant: String, user: String } // put there by the auth middleware
    ///
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new())
    ///     .with_default_scope(|parts| {
    ///         let caller = parts.extensions.get::<Caller>()?;
    ///         Some(vec![caller.tenant.clone(), caller.user.clone()])
    ///     });
    /// assert!(idem.has_default_scope());
    /// ```
    #[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "axum", feature = "actix", feature = "tonic")))
    )]
    #[must_use]
    pub fn with_default_scope(
        mut self,
        f: impl Fn(&http::request::Parts) -> Option<Vec<String>> + Send + Sync + 'static,
    ) -> Self {
        self.settings().default_scope = Some(Arc::new(f));
        self
    }

    /// `true` once [`Idem::with_default_scope`] set a default scope.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// assert!(!Idem::new(idem_runtime::store::MemoryStore::new()).has_default_scope());
    /// ```
    #[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "axum", feature = "actix", feature = "tonic")))
    )]
    pub fn has_default_scope(&self) -> bool {
        self.inner.default_scope.is_some()
    }

    /// The default scope of a request: `None` when none is configured, `Some(None)` when the
    /// request has no identity to scope by.
    #[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
    pub(crate) fn default_scope_of(
        &self,
        parts: &http::request::Parts,
    ) -> Option<Option<Vec<String>>> {
        self.inner.default_scope.as_ref().map(|f| f(parts))
    }

    /// The store.
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// let _store: &std::sync::Arc<dyn idem_runtime::store::Store> = idem.store();
    /// ```
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The outcome policy.
    ///
    /// ```
    /// use idem_runtime::engine::{Contract, Disposition, Idem};
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// assert_eq!(idem.policy().classify(Contract::ExactReplay, 201), Disposition::Store);
    /// ```
    pub fn policy(&self) -> &dyn OutcomePolicy {
        &*self.inner.policy
    }

    /// The default largest body stored whole: what [`Idem::with_max_snapshot_bytes`] set, or
    /// [`Idem::DEFAULT_MAX_SNAPSHOT_BYTES`].
    ///
    /// ```
    /// use idem_runtime::engine::Idem;
    /// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// assert_eq!(idem.max_snapshot_bytes(), Idem::DEFAULT_MAX_SNAPSHOT_BYTES);
    /// ```
    pub fn max_snapshot_bytes(&self) -> usize {
        self.inner.max_snapshot_bytes
    }
}

/// What takes a default scope (`scope = default`), in the report of a handle without one: an
/// HTTP handler or a gRPC method.
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScopeTaker {
    /// `handler`, `method`.
    word: &'static str,
    /// What the caller is answered.
    answer: &'static str,
    /// The message of [`IdempotencyError::Misconfigured`].
    misconfigured: &'static str,
}

#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
impl ScopeTaker {
    /// An axum or actix-web handler.
    #[cfg(any(feature = "axum", feature = "actix"))]
    pub(crate) const HANDLER: ScopeTaker = ScopeTaker {
        word: "handler",
        answer: "500",
        misconfigured: "the handler takes the default scope (`scope = default`) and the `Idem` handle has none: set one with `Idem::with_default_scope`",
    };
    /// A tonic method.
    #[cfg(feature = "tonic")]
    pub(crate) const METHOD: ScopeTaker = ScopeTaker {
        word: "method",
        answer: "INTERNAL",
        misconfigured: "the method takes the default scope (`scope = default`) and the `Idem` handle has none: set one with `Idem::with_default_scope`",
    };
}

/// The parts of a request's default scope, from what [`Idem::default_scope_of`] found for it
/// (`found`), for a `taker` that says `scope = default`.
///
/// # Errors
/// [`IdempotencyError::Unscoped`] when the request carries no identity;
/// [`IdempotencyError::Misconfigured`] when the handle has no default scope, a mistake of the
/// server's setup, reported as an error with the request's `method` (and `path`, if apart).
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) fn default_scope_parts(
    found: &Option<Option<Vec<String>>>,
    taker: ScopeTaker,
    method: &str,
    path: Option<&str>,
) -> Result<Vec<String>, IdempotencyError> {
    match found {
        Some(Some(parts)) => Ok(parts.clone()),
        Some(None) => Err(IdempotencyError::Unscoped),
        None => {
            tracing::error!(
                target: "idem",
                method = %method,
                path,
                "a {kind} with `scope = default` runs on an `Idem` handle without a default \
                 scope: set one with `Idem::with_default_scope`, or give the {kind} its own \
                 `scope = [..]`; answering {answer}",
                kind = taker.word,
                answer = taker.answer,
            );
            Err(IdempotencyError::Misconfigured {
                message: taker.misconfigured,
            })
        }
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
/// fn limit(h: &impl AsIdem) -> usize { h.as_idem().max_snapshot_bytes() }
/// assert_eq!(limit(&idem), limit(&&*idem));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idem handle",
    note = "pass an `idem::Idem` (or a reference, `Arc` or `Box` of one) to `store = ..`; build it with `Idem::new(store)`",
    note = "on a tonic method the handle is `self`'s: implement `idem::AsIdem` for the service (`fn as_idem(&self) -> &Idem {{ &self.idem }}`), or write `store = self.idem`"
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
