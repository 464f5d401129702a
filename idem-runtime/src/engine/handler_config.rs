//! [`HandlerConfig`], what `#[idempotent]` fixes at compile time for one handler (and what the
//! tower layer shares with it), and its defaults ([`DEFAULT_TTL`], [`DEFAULT_LEASE`],
//! [`default_timeout`]).
//!
//! Every method stays `const`: generated code builds the configuration as a `static`.

use core::time::Duration;

use super::contract::Contract;

/// Everything `#[idempotent]` fixes at compile time for one handler; generated as a `static`.
/// The tower layer takes one too (`IdempotencyLayer::config`).
///
/// Built with `const` builder methods, by generated and hand-written code alike.
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
/// assert_eq!(CREATE_PAYMENT, HandlerConfig::new("payments::create")
///     .replay_headers(&["x-request-cost"])
///     .lease(Duration::from_secs(10))
///     .ttl(Duration::from_secs(7_776_000)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerConfig {
    pub(crate) operation: Option<&'static str>,
    pub(crate) ttl: Duration,
    pub(crate) lease: Duration,
    pub(crate) timeout: Option<Duration>,
    pub(crate) contract: Contract,
    pub(crate) replay_headers: &'static [&'static str],
    pub(crate) fail_open: bool,
    pub(crate) max_snapshot_bytes: Option<usize>,
    pub(crate) wait: Duration,
    pub(crate) remember: Option<Duration>,
}

/// The TTL unless one is given (`#[idempotent]`, [`HandlerConfig::new`], the tower layer): 7
/// days, the retention of ordinary writes (contract S20).
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 86_400);

/// The lease unless one is given: 30 seconds.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The handler timeout unless one is given: 4 leases (2 minutes with the default lease). The
/// lease is chosen from the handler's longest run time (S23), so four of them leave a handler
/// ample room while a hung one still ends, and with it the renewal of its lease and expiry.
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::engine::default_timeout;
/// assert_eq!(default_timeout(Duration::from_secs(30)), Duration::from_secs(120));
/// ```
pub const fn default_timeout(lease: Duration) -> Duration {
    lease.saturating_mul(4)
}

impl HandlerConfig {
    /// The TTL unless one is given: 7 days ([`DEFAULT_TTL`]).
    pub const DEFAULT_TTL: Duration = DEFAULT_TTL;
    /// The lease unless one is given: 30 seconds ([`DEFAULT_LEASE`]).
    pub const DEFAULT_LEASE: Duration = DEFAULT_LEASE;

    /// The configuration of the operation `operation`, with the defaults below.
    ///
    /// The operation names the operation inside the scoped key
    /// (`tenant:user:operation:client_key`): two handlers with different operations never share
    /// a record, even under the same client key. Changing the name turns retries that arrive
    /// after the deploy into new operations, so treat it like a public name. An axum handler
    /// may be named after its route instead ([`HandlerConfig::for_route`]); [`run_once`](super::run_once)
    /// has no route and needs a name.
    ///
    /// Defaults: a TTL of [`DEFAULT_TTL`] (7 days, ordinary writes, contract S20), a lease of
    /// [`DEFAULT_LEASE`] (30 seconds), a timeout of 4 leases ([`default_timeout`]),
    /// [`Contract::ExactReplay`], no extra headers, fail closed, the handle's snapshot size.
    /// `#[idempotent]` and the tower layer start from the same defaults
    /// ([`HandlerConfig::for_route`]).
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::HandlerConfig;
    /// const C: HandlerConfig = HandlerConfig::new("op");
    /// assert_eq!(C, HandlerConfig::new("op").ttl(Duration::from_secs(7 * 86_400)).lease(Duration::from_secs(30)));
    /// assert_eq!(C.timeout_in_force(), Duration::from_secs(120));
    /// ```
    pub const fn new(operation: &'static str) -> Self {
        HandlerConfig {
            operation: Some(operation),
            ttl: DEFAULT_TTL,
            lease: DEFAULT_LEASE,
            timeout: None,
            contract: Contract::ExactReplay,
            replay_headers: &[],
            fail_open: false,
            max_snapshot_bytes: None,
            wait: Duration::ZERO,
            remember: None,
        }
    }

    /// The defaults of [`HandlerConfig::new`] for an HTTP handler whose operation is named after
    /// its route (what `#[idempotent]` uses on an axum handler without `operation = ".."`): the
    /// request's method and axum's matched route template, `"POST /v1/payments/{id}/refunds"` —
    /// what the contract calls the endpoint, stable when the handler function is renamed or
    /// moved. The tower layer, which fingerprints only the body, names the operation after
    /// the request path instead, so that a path parameter keeps two resources' keys apart.
    ///
    /// ```
    /// use idem_runtime::engine::HandlerConfig;
    /// static CREATE: HandlerConfig = HandlerConfig::for_route();
    /// assert_eq!(CREATE.operation(), None);
    /// ```
    pub const fn for_route() -> Self {
        HandlerConfig {
            operation: None,
            ..HandlerConfig::new("")
        }
    }

    /// The operation's name; `None` for an HTTP handler named after its route
    /// ([`HandlerConfig::for_route`]).
    pub const fn operation(&self) -> Option<&'static str> {
        self.operation
    }

    /// The timeout in force: what [`HandlerConfig::timeout`] set, or [`default_timeout`] of the
    /// lease.
    ///
    /// ```
    /// # use core::time::Duration;
    /// # use idem_runtime::engine::HandlerConfig;
    /// let c = HandlerConfig::new("op").lease(Duration::from_secs(5));
    /// assert_eq!(c.timeout_in_force(), Duration::from_secs(20));
    /// assert_eq!(c.timeout(Duration::from_secs(3)).timeout_in_force(), Duration::from_secs(3));
    /// ```
    pub const fn timeout_in_force(&self) -> Duration {
        match self.timeout {
            Some(t) => t,
            None => default_timeout(self.lease),
        }
    }

    /// Checks, at compile time where the configuration is a constant (what `#[idempotent]`
    /// generates), that the durations make sense: a positive lease shorter than the ttl, a
    /// positive timeout.
    ///
    /// # Panics
    /// With a message that says what to change.
    ///
    /// ```
    /// use idem_runtime::engine::HandlerConfig;
    /// const _: () = HandlerConfig::new("op").assert_valid();
    /// ```
    pub const fn assert_valid(&self) {
        assert!(
            self.lease.as_millis() >= 1,
            "the lease must be at least 1 ms: set `lease` to more than the handler's usual run time"
        );
        assert!(
            self.lease.as_millis() < self.ttl.as_millis(),
            "the lease must be shorter than the ttl (7 days unless `ttl` is set): the lease bounds how long a crashed attempt blocks retries, the ttl how long retries are recognized; shorten `lease` or lengthen `ttl`"
        );
        if let Some(r) = self.remember {
            assert!(
                r.as_millis() > self.ttl.as_millis(),
                "`remember` must be longer than the ttl (7 days unless `ttl` is set): it keeps the key known after its response expires; lengthen `remember`, or leave it out"
            );
        }
        if let Some(t) = self.timeout {
            assert!(
                t.as_millis() >= 1,
                "the timeout must be at least 1 ms: set `timeout` to the longest the handler may run"
            );
        }
    }

    /// How long the guarantee lasts, counted from the claim (S19): after it a reuse of the key is
    /// a new request.
    #[must_use]
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long a retry waits before it may take over an attempt that stopped renewing its
    /// lease (a crashed process, S23). The engine renews it in the background every `lease / 2`
    /// while the handler runs and while its result is stored, so it bounds how long a crash
    /// blocks retries (`409`), not how long the handler may run ([`HandlerConfig::timeout`]).
    #[must_use]
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The longest a handler may run: then its future is dropped, the record keeps its
    /// operation id with its lease ended (a retry takes it over at once and runs under the same
    /// operation id), and the caller gets `503 timed-out` + `Retry-After`. `None` takes
    /// [`default_timeout`] of the lease (4 leases).
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// What a replay returns.
    #[must_use]
    pub const fn contract(mut self, contract: Contract) -> Self {
        self.contract = contract;
        self
    }

    /// Response headers kept in the snapshot besides `content-type` and `location` (lowercase
    /// names). `set-cookie`, `authorization`, `proxy-authenticate`, `www-authenticate`,
    /// `proxy-authorization` and hop-by-hop headers are never kept, even if listed.
    #[must_use]
    pub const fn replay_headers(mut self, headers: &'static [&'static str]) -> Self {
        self.replay_headers = headers;
        self
    }

    /// When the store is unavailable: `false` (the default) answers `503` + `Retry-After` and
    /// does not run the handler (fail closed); `true` runs the handler **without** protection
    /// and marks the response `Idempotency-Status: unprotected`.
    #[must_use]
    pub const fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// How long a duplicate that finds the first attempt of the same request still running
    /// waits for it to end, instead of being answered `409` + `Retry-After` at once; zero (the
    /// default) waits not at all.
    ///
    /// When the first attempt ends within the bound, the duplicate is answered what a retry
    /// would be then: the stored response (`Idempotent-Replayed: true`), or, when the attempt
    /// ended without a result, its operation continued by this request. Past the bound it is
    /// answered `409` + `Retry-After` as without a wait, and so is a duplicate over the
    /// handle's cap of waiters ([`Idem::with_max_waiters`](super::Idem::with_max_waiters)).
    /// Another request under the key is `422` at once, whatever the wait. Waiters in this
    /// process are woken by the attempt as it settles; an attempt in another process is
    /// noticed by claiming again, at most every 250 ms (`docs/http.md`, "Waiting for the first
    /// attempt").
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::HandlerConfig;
    /// static CREATE: HandlerConfig = HandlerConfig::for_route().wait(Duration::from_secs(2));
    /// assert_eq!(CREATE.waits(), Duration::from_secs(2));
    /// ```
    #[must_use]
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Remembers the key for `remember` from the claim, past the TTL: once the stored response
    /// expires, a retry of the same request is answered `410 key-expired` with the business
    /// number, the operation id and the times the record keeps, and the operation does **not**
    /// run again; another request under the key is still `422`; after `remember` the key is new.
    /// The purge frees the response at the TTL and deletes the record at the end of `remember`.
    /// Unset (the default), the record ends at the TTL, and a retry after it runs a new
    /// operation (S19-S21). Must be longer than the TTL ([`HandlerConfig::assert_valid`]).
    ///
    /// ```
    /// use core::time::Duration;
    /// use idem_runtime::engine::HandlerConfig;
    /// const DAY: Duration = Duration::from_secs(86_400);
    /// static PAY: HandlerConfig = HandlerConfig::new("payments::create")
    ///     .ttl(DAY.saturating_mul(7))
    ///     .remember(DAY.saturating_mul(365));
    /// const _: () = PAY.assert_valid();
    /// assert_eq!(PAY.remembers(), Some(DAY.saturating_mul(365)));
    /// ```
    #[must_use]
    pub const fn remember(mut self, remember: Duration) -> Self {
        self.remember = Some(remember);
        self
    }

    /// How long the key is remembered past its TTL ([`HandlerConfig::remember`]), if at all.
    pub const fn remembers(&self) -> Option<Duration> {
        self.remember
    }

    /// How long a duplicate waits for the first attempt ([`HandlerConfig::wait`]).
    pub const fn waits(&self) -> Duration {
        self.wait
    }

    /// Largest response body stored whole; unless set, the [`Idem`](super::Idem) handle's
    /// ([`Idem::DEFAULT_MAX_SNAPSHOT_BYTES`](super::Idem::DEFAULT_MAX_SNAPSHOT_BYTES) unless changed).
    #[must_use]
    pub const fn max_snapshot_bytes(mut self, bytes: usize) -> Self {
        self.max_snapshot_bytes = Some(bytes);
        self
    }
}
