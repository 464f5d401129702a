//! The interface between the engine and a store: the [`Store`] trait and the values that cross
//! it (claims, leases, records, completions). Everything else under `store/` implements it.

use core::fmt;
use core::future::Future;
use core::ops::ControlFlow;
use core::pin::Pin;
use core::time::Duration;

use crate::fingerprint::RequestHash;
use crate::key::ScopedKey;

use super::clock::{Clock, Timestamp};
use super::error::StoreError;

/// A boxed, sendable future: the return type of every [`Store`] method, so that the trait stays
/// object-safe (`Arc<dyn Store>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The life of a record (column `state`, S4: 0 processing / 1 completed / 2 failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// A handler holds a lease and runs.
    Processing,
    /// A response snapshot is stored and replayed.
    Completed,
    /// A terminal error response (e.g. a 500 under `exact_replay`, S2) is stored and replayed.
    FailedStored,
}

impl RecordState {
    /// The value of the `state` column.
    pub const fn code(self) -> i16 {
        match self {
            RecordState::Processing => 0,
            RecordState::Completed => 1,
            RecordState::FailedStored => 2,
        }
    }

    /// The state of a `state` column value.
    pub const fn from_code(code: i64) -> Option<Self> {
        match code {
            0 => Some(RecordState::Processing),
            1 => Some(RecordState::Completed),
            2 => Some(RecordState::FailedStored),
            _ => None,
        }
    }
}

/// The terminal state a [`Completion`] stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The handler's response, stored for replay.
    Completed,
    /// A terminal error response stored for replay (a replayed 500 under `exact_replay`).
    FailedStored,
}

impl From<Outcome> for RecordState {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Completed => RecordState::Completed,
            Outcome::FailedStored => RecordState::FailedStored,
        }
    }
}

/// What [`Store::claim`] is asked.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The scoped key.
    pub key: &'a ScopedKey,
    /// SHA-256 of the request's canonical form (S3).
    pub request_hash: RequestHash,
    /// How long the handler may run before another claim may take the record over (S23). It must
    /// exceed the handler's longest run time plus the clock skew between servers.
    pub lease: Duration,
    /// How long the record (and so the guarantee) lives, counted from the claim (S19).
    pub ttl: Duration,
    /// How long the operation is remembered, counted from the claim, when that is longer than
    /// `ttl` (`remember = "1y"`): past the TTL the stored response is no longer replayed (and
    /// the purge frees it), but the record stays until then, so that a retry is answered
    /// [`Claim::Remembered`] instead of running the operation again. `None` (or a duration not
    /// longer than the TTL): the record ends at the TTL.
    pub remember: Option<Duration>,
}

impl<'a> ClaimRequest<'a> {
    /// A claim of `key` for a request hashing to `request_hash`.
    pub fn new(
        key: &'a ScopedKey,
        request_hash: RequestHash,
        lease: Duration,
        ttl: Duration,
    ) -> Self {
        ClaimRequest {
            key,
            request_hash,
            lease,
            ttl,
            remember: None,
        }
    }

    /// Remembers the operation for `remember` from the claim, past the TTL (see
    /// [`ClaimRequest::remember`](ClaimRequest#structfield.remember)).
    pub fn remembering(mut self, remember: Duration) -> Self {
        self.remember = Some(remember);
        self
    }

    /// How long the stored response is replayed, from the claim: the TTL, never less than the
    /// lease.
    pub(crate) fn replay_window(&self) -> Duration {
        self.ttl.max(self.lease)
    }

    /// The remember window when it outlasts the replay window, else `None` (nothing to remember
    /// past the TTL).
    pub(crate) fn remember_window(&self) -> Option<Duration> {
        self.remember.filter(|r| *r > self.replay_window())
    }

    /// The remember window in milliseconds as the SQL statements bind it: 0 without one (their
    /// `GREATEST(lease, ttl, remember)` is then the TTL's window, and `replay_until` stays
    /// `NULL`).
    #[cfg_attr(
        not(any(
            feature = "postgres",
            feature = "mysql",
            feature = "sqlite",
            feature = "redis"
        )),
        allow(dead_code)
    )]
    pub(crate) fn remember_param(&self) -> i64 {
        self.remember_window()
            .map_or(0, crate::store::clock::duration_millis)
    }

    /// Checks the durations: the lease must be at least 1 ms.
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        if self.lease < Duration::from_millis(1) {
            return Err(StoreError::Invalid(format!(
                "the lease of operation `{}` is {:?}: use at least 1 ms, and more than the handler's longest run time",
                self.key.operation(),
                self.lease
            )));
        }
        Ok(())
    }

    /// `(lease_until, expire_at)` of a claim made at `now`: the record never expires before its
    /// lease ends, and lives on through the remember window.
    pub(crate) fn deadlines(&self, now: Timestamp) -> (Timestamp, Timestamp) {
        let lease_until = now + self.lease;
        let end = self.remember_window().unwrap_or(self.replay_window());
        (lease_until, now + end)
    }

    /// When the response of a record claimed afresh at `now` stops being replayed, for a
    /// remembered record (`None` otherwise: replayed until `expire_at`).
    pub(crate) fn replay_until(&self, now: Timestamp) -> Option<Timestamp> {
        self.remember_window().map(|_| now + self.replay_window())
    }
}

/// The answer of [`Store::claim`].
#[derive(Debug, Clone)]
pub enum Claim {
    /// This request owns the key: run the handler, then complete or release the lease.
    Acquired(Lease),
    /// A stored snapshot (completed or failed-but-stored); compare its `request_hash` and replay.
    Completed(Record),
    /// A completed record past its TTL and within its remember window
    /// ([`ClaimRequest::remember`](ClaimRequest#structfield.remember)): its response is no longer
    /// replayed (its headers and body may already be freed), and the operation must not run
    /// again. The same request is answered `key-expired` with what the record keeps (business
    /// number, operation id, status, times), another `422`.
    Remembered(Record),
    /// Another request holds a live lease (or an expired one for another request hash).
    InProgress {
        /// The request hash of the holder (a different one means `422`, not `409`).
        request_hash: RequestHash,
        /// Time left on the holder's lease (`Retry-After`).
        retry_after: Duration,
    },
}

/// Ownership of a processing record, returned by a successful claim or [`Store::extend`].
///
/// The fencing token `fence` grows with every claim of the record; [`Store::complete`],
/// [`Store::release`], [`Store::abandon`] and [`Store::extend`] succeed only while `fence` and
/// `operation_id` are still the record's and it is processing (the operation id also tells apart
/// two records that both start at fence 1, one released or purged, the other claimed afresh).
/// Its times are the store's: on the SQL stores the database server computed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The claimed key.
    pub key: ScopedKey,
    /// The request hash the record was claimed with.
    pub request_hash: RequestHash,
    /// The fencing token (1 for a fresh record, +1 for every later claim).
    pub fence: u64,
    /// The stable operation id: generated when the operation is first claimed and kept across
    /// lease takeovers. Pass it downstream (S22) and keep a unique constraint on it in the
    /// business table (S23).
    pub operation_id: String,
    /// When the lease ends (by the store's clock: the database's on the SQL stores).
    pub lease_until: Timestamp,
    /// When the record expires (by the store's clock).
    pub expire_at: Timestamp,
    /// `true` when this claim took over the expired lease of an earlier holder of the same
    /// operation: the earlier attempt may have done part of the work (or may still be running).
    pub took_over: bool,
}

/// The response snapshot written by [`Store::complete`] (S11, S12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Completed or failed-but-stored.
    pub outcome: Outcome,
    /// HTTP status, 100 to 999.
    pub status: u16,
    /// Response headers, already filtered by the caller's whitelist.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Response body.
    pub body: Vec<u8>,
    /// The business number callers use to query and reconcile (S11).
    pub biz_no: Option<String>,
    /// A new expiry for the stored snapshot, an absolute time compared with the store's clock
    /// (the database server's on the SQL stores); `None` keeps the one set at claim time.
    pub expire_at: Option<Timestamp>,
}

impl Completion {
    /// A snapshot with no headers, no business number and the claim's expiry.
    pub fn new(outcome: Outcome, status: u16, body: Vec<u8>) -> Self {
        Completion {
            outcome,
            status,
            headers: Vec::new(),
            body,
            biz_no: None,
            expire_at: None,
        }
    }

    /// Sets the whitelisted headers.
    pub fn with_headers(mut self, headers: Vec<(String, Vec<u8>)>) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the business number.
    pub fn with_biz_no(mut self, biz_no: impl Into<String>) -> Self {
        self.biz_no = Some(biz_no.into());
        self
    }

    /// Sets the expiry of the stored snapshot.
    pub fn with_expire_at(mut self, expire_at: Timestamp) -> Self {
        self.expire_at = Some(expire_at);
        self
    }

    /// The bytes this snapshot takes in a store: body, header names and values, and business
    /// number (what every backend writes as values; its own framing comes on top).
    pub fn stored_bytes(&self) -> u64 {
        let headers: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        let biz_no = self.biz_no.as_ref().map_or(0, String::len);
        (self.body.len() + headers + biz_no) as u64
    }

    /// [`StoreError::TooLarge`] when this snapshot is over `limit` bytes
    /// ([`Completion::stored_bytes`]): a store refuses it before sending anything, since the
    /// same write would fail the same way on every try.
    #[cfg_attr(
        not(any(
            feature = "postgres",
            feature = "mysql",
            feature = "sqlite",
            feature = "redis"
        )),
        allow(dead_code)
    )]
    pub(crate) fn fits(&self, limit: u64) -> Result<(), StoreError> {
        let bytes = self.stored_bytes();
        if bytes > limit {
            return Err(StoreError::TooLarge { bytes, limit });
        }
        Ok(())
    }

    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        if !(100..=999).contains(&self.status) {
            return Err(StoreError::Invalid(format!(
                "response status {} is not an HTTP status: use 100 to 999",
                self.status
            )));
        }
        Ok(())
    }
}

/// A stored record, as [`Store::get`] and [`Claim::Completed`] return it.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    /// The readable key (`tenant:user:operation:client_key`).
    pub key: String,
    /// The request hash of the request that created the record.
    pub request_hash: RequestHash,
    /// Processing, completed or failed-but-stored.
    pub state: RecordState,
    /// The stable operation id.
    pub operation_id: String,
    /// The current fencing token.
    pub fence: u64,
    /// The stored status (`None` while processing).
    pub status: Option<u16>,
    /// The stored, whitelisted response headers.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The stored response body.
    pub body: Vec<u8>,
    /// The stored business number.
    pub biz_no: Option<String>,
    /// When the current lease was taken.
    pub locked_at: Timestamp,
    /// When the current (or last) lease ends.
    pub lease_until: Timestamp,
    /// When the record becomes logically absent: the end of its TTL, or of its remember window
    /// when it has one.
    pub expire_at: Timestamp,
    /// For a remembered record, when its response stops being replayed (the TTL's end, before
    /// `expire_at`), negated once the purge freed the response ([`Record::replays_until`] is
    /// the time either way); `None`: replayed until `expire_at`.
    pub replay_until: Option<Timestamp>,
    /// When the record was first claimed.
    pub created_at: Timestamp,
    /// When the record was last written.
    pub updated_at: Timestamp,
    /// When the snapshot was stored.
    pub completed_at: Option<Timestamp>,
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("key", &self.key)
            .field("request_hash", &self.request_hash)
            .field("state", &self.state)
            .field("operation_id", &self.operation_id)
            .field("fence", &self.fence)
            .field("status", &self.status)
            .field("headers", &self.headers.len())
            .field("body_len", &self.body.len())
            .field("biz_no", &self.biz_no)
            .field("lease_until", &self.lease_until)
            .field("expire_at", &self.expire_at)
            .field("replay_until", &self.replay_until)
            .finish_non_exhaustive()
    }
}

impl Record {
    /// `true` once `now` has reached `expire_at`: the record is logically absent (S21).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expire_at <= now
    }

    /// When the stored response stops being replayed: `replay_until` for a remembered record,
    /// `expire_at` otherwise.
    pub fn replays_until(&self) -> Timestamp {
        self.replay_until.map_or(self.expire_at, |t| {
            Timestamp::from_millis(t.as_millis().saturating_abs())
        })
    }

    /// `true` once the purge freed the response of this remembered record.
    pub fn response_freed(&self) -> bool {
        self.replay_until.is_some_and(|t| t.as_millis() < 0)
    }

    /// `true` when its response is past its TTL at `now`, or freed already (whatever `now`
    /// says: a store's clock that stepped back never makes a freed response replayable).
    fn response_expired(&self, now: Timestamp) -> bool {
        self.response_freed() || self.replays_until() <= now
    }

    /// `true` when, at `now`, the record is stored, past its TTL and within its remember
    /// window: its response is no longer replayed, its operation still known.
    pub fn is_remembered(&self, now: Timestamp) -> bool {
        self.state != RecordState::Processing && self.response_expired(now) && !self.is_expired(now)
    }

    /// Applies a completion's new expiry ([`Completion::expire_at`]): it moves the end of the
    /// replayed response, which for a remembered record is `replay_until` (the record then
    /// lives at least as long); `None` keeps the claim's.
    ///
    /// A remembered response's end is never before its creation (`created_at` + 1 ms at the
    /// earliest): an expiry in the past makes it remembered at once, as on every store.
    pub(crate) fn set_expiry(&mut self, expire_at: Option<Timestamp>) {
        let Some(at) = expire_at else { return };
        match self.replay_until {
            None => self.expire_at = at,
            Some(_) => {
                let at = at.max(self.created_at + Duration::from_millis(1));
                (self.replay_until, self.expire_at) = (Some(at), self.expire_at.max(at));
            }
        }
    }

    /// What a claim for `request_hash` at `now` finds in this record.
    pub(crate) fn decide(&self, request_hash: &RequestHash, now: Timestamp) -> Found {
        if self.is_expired(now) {
            return Found::Claimable;
        }
        match self.state {
            RecordState::Processing
                if self.lease_until <= now && self.request_hash == *request_hash =>
            {
                Found::Claimable
            }
            RecordState::Processing => Found::InProgress {
                request_hash: self.request_hash,
                retry_after: self.lease_until.saturating_duration_since(now),
            },
            RecordState::Completed | RecordState::FailedStored if self.response_expired(now) => {
                Found::Remembered
            }
            RecordState::Completed | RecordState::FailedStored => Found::Completed,
        }
    }
}

/// The `replay_until` column as a time, negative once the purge freed the response (see the
/// stores' migrations), as [`Record::replay_until`] holds it; none unless its absolute value
/// falls within the record's life (`created_at < |replay_until| <= expire_at`, which every
/// value idem writes does). A build from before `remember` replaces a record without clearing
/// the column: a stale value left so (during a rolling deployment, or after a downgrade) is
/// not the new record's, and must not make it remembered.
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite",
        feature = "redis"
    )),
    allow(dead_code)
)]
pub(crate) fn valid_replay_until(
    replay_until: Option<i64>,
    created_at: i64,
    expire_at: i64,
) -> Option<Timestamp> {
    replay_until
        .filter(|t| (created_at + 1..=expire_at).contains(&t.saturating_abs()))
        .map(Timestamp::from_millis)
}

/// What a claim finds in an existing record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Expired record or expired lease of the same request: take it.
    Claimable,
    /// A stored snapshot.
    Completed,
    /// A stored record past its TTL, in its remember window.
    Remembered,
    /// A live lease (or an expired one of another request hash, which is never taken over).
    InProgress {
        request_hash: RequestHash,
        retry_after: Duration,
    },
}

impl Found {
    /// Settles a claim that found `record`: `Break` with the claim's answer when it may not take
    /// the record (a replay of the snapshot, which `snapshot` makes from `record`, or "in
    /// progress"), `Continue` with `record` when it may (S21, S23).
    pub(crate) fn settle<R>(
        self,
        record: R,
        snapshot: impl FnOnce(R) -> Record,
    ) -> ControlFlow<Claim, R> {
        match self {
            Found::Claimable => ControlFlow::Continue(record),
            Found::Completed => ControlFlow::Break(Claim::Completed(snapshot(record))),
            Found::Remembered => ControlFlow::Break(Claim::Remembered(snapshot(record))),
            Found::InProgress {
                request_hash,
                retry_after,
            } => ControlFlow::Break(Claim::InProgress {
                request_hash,
                retry_after,
            }),
        }
    }
}

/// The claim engine's storage: one record per scoped key, claimed atomically through a unique
/// index.
///
/// Object-safe: the HTTP layer holds an `Arc<dyn Store>`. Every method returns a [`BoxFuture`].
/// Implementations: `MemoryStore`, and behind cargo features `SqliteStore`, `PostgresStore`,
/// `MySqlStore`, `RedisStore`. All follow the same semantics, checked by one shared test suite:
///
/// * a record whose `expire_at` has passed is logically absent: the next claim replaces it
///   atomically, before any physical delete (S21);
/// * a processing record whose lease has ended is taken over by the next claim **with the same
///   request hash**, with a higher fencing token and the same operation id (S23); a claim with
///   another request hash gets [`Claim::InProgress`] (and the engine answers `422`);
/// * `complete`, `release`, `abandon` and `extend` act only while the lease's fence and
///   operation id are still the record's and it is processing; a lease whose record was taken
///   over, released, replaced or purged gets [`StoreError::FencedOut`] and changes nothing. A
///   lease that ran out, or a record past its `expire_at`, that nobody superseded still
///   completes: no one else ran, so its result is never dropped;
/// * time is the store's: the SQL stores and the Redis store decide by the **database server's
///   clock** (the application servers' clocks never matter; `with_clock` overrides it in
///   tests), the memory store by its injected [`Clock`].
///
/// The design, the SQL of each backend and its statement counts: `docs/storage.md`.
///
/// `Any` is a supertrait so that the atomic mode ([`Tx`](crate::store::Tx)) can find the
/// concrete SQL store behind a handle's `Arc<dyn Store>`.
#[diagnostic::on_unimplemented(
    note = "idem ships `MemoryStore`, `SqliteStore`, `PostgresStore`, `MySqlStore` and `RedisStore` (the last four behind cargo features `sqlite`, `postgres`, `mysql`, `redis`)"
)]
pub trait Store: core::any::Any + Send + Sync + fmt::Debug {
    /// Claims `req.key` (see [`Claim`]). One atomic statement in the common paths; see each
    /// backend's documentation for its statement counts.
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Stores the response snapshot and ends the lease, if `lease.fence` and
    /// `lease.operation_id` are still the record's and it is processing, even past its lease or
    /// `expire_at` (nobody superseded it); otherwise [`StoreError::FencedOut`] and nothing is
    /// written. One short statement (S18).
    ///
    /// Idempotent: when the record is already stored under this very lease (fence and operation
    /// id), an earlier call landed and only its acknowledgement was lost; this returns `Ok` and
    /// the first snapshot stands. So a completion that failed with a transient error may be
    /// retried as it is.
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Deletes the processing record, so that a corrected retry runs (nothing was saved, S2):
    /// only for an attempt known to have had no effect, since a retry then starts a *new*
    /// operation (see [`Store::abandon`] otherwise). [`StoreError::FencedOut`] when the lease no
    /// longer owns it (same conditions as [`Store::complete`]).
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Ends the lease at once but keeps the record: still processing, same fence, same operation
    /// id. The next claim with the same request hash takes it over immediately (`took_over`,
    /// fence + 1, the **same** operation id), instead of waiting for the lease to run out or
    /// starting a new operation.
    ///
    /// This is what the engine does with an attempt whose handler started but did not finish
    /// (the request future was dropped, the handler panicked or timed out, the response failed):
    /// its effects may exist under its operation id, so the record must not be deleted
    /// ([`Store::release`] would let a retry start a *new* operation). [`StoreError::FencedOut`]
    /// when the lease no longer owns the record (completed, taken over, released).
    fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Renews the lease of a long handler: the lease then ends `by` from now, by the store's
    /// clock (and the record lives at least that long). Returns the renewed lease (same fence);
    /// keep it in place of the old one. [`StoreError::FencedOut`] when the lease no longer owns
    /// the record (same conditions as [`Store::complete`]).
    fn extend<'a>(
        &'a self,
        lease: &'a Lease,
        by: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>>;

    /// The live record of `key`, if any (a record expired by the store's clock is `None`).
    fn get<'a>(&'a self, key: &'a ScopedKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>>;

    /// [`Store::get`], with the store's "now" the record was read at (the database server's on
    /// the SQL stores and Redis), so that the caller decides about it as a claim would: a
    /// remembered record ([`Record::is_remembered`]) must not be replayed.
    ///
    /// The default reads [`Store::clock`] beside [`Store::get`].
    fn get_with_now<'a>(
        &'a self,
        key: &'a ScopedKey,
    ) -> BoxFuture<'a, Result<Option<(Record, Timestamp)>, StoreError>> {
        Box::pin(async move {
            let now = self.clock().now();
            Ok(self.get(key).await?.map(|r| (r, now)))
        })
    }

    /// Physically deletes at most `batch` records expired by the store's clock, oldest expiry
    /// first (ties by key hash), using the index on `expire_at`; returns how many were deleted.
    /// Call it repeatedly (see `Sweeper`); sweepers on several instances may run at once.
    fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// The purge's first phase for remembered records: frees the stored headers and body of at
    /// most `batch` records past their TTL (`replay_until`) and within their remember window,
    /// oldest first, keeping what identifies the operation; returns how many were freed. Call
    /// it beside [`Store::purge_expired`] (the `Sweeper` and `idem purge` do).
    ///
    /// The default frees nothing: a store that ignores
    /// [`ClaimRequest::remember`](ClaimRequest#structfield.remember) keeps no record past its
    /// TTL.
    fn purge_responses(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        let _ = batch;
        Box::pin(async { Ok(0) })
    }

    /// Creates or upgrades the store's schema (idempotent; a no-op for `MemoryStore`).
    fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The application-side clock of the store: the memory store's clock, or the override a
    /// SQL store was given with `with_clock` (`SystemClock` without one, although a SQL store
    /// then decides by the database server's clock, not by this one).
    fn clock(&self) -> &dyn Clock;

    /// A short name of the backend: the `backend` label of idem's metrics (`memory`, `sqlite`,
    /// `postgres`, `mysql`, `redis`); `custom` unless the store says.
    fn backend(&self) -> &'static str {
        "custom"
    }
}

/// A new stable operation id: a random UUID version 4, lowercase hyphenated.
pub(crate) fn new_operation_id() -> Result<String, StoreError> {
    let mut b = random_16()?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1; // the hyphen already there
        }
        out[at] = DIGITS[usize::from(byte >> 4)];
        out[at + 1] = DIGITS[usize::from(byte & 0xf)];
        at += 2;
    }
    // Only ASCII hex digits and hyphens were written.
    Ok(core::str::from_utf8(&out).unwrap_or_default().to_owned())
}

/// Operating-system randomness drawn [`RANDOM_POOL`] bytes at a time, per thread.
struct RandomPool {
    bytes: [u8; RANDOM_POOL],
    /// Bytes of `bytes` already handed out.
    used: usize,
    /// The process that drew them: a child forked since draws its own, so that parent and child
    /// never hand out the same id.
    pid: u32,
}

/// 32 operation ids per `getrandom` system call, whose cost is in BENCHMARKS.md ("Cost per
/// request").
const RANDOM_POOL: usize = 512;

std::thread_local! {
    static RANDOM: core::cell::RefCell<RandomPool> = const {
        core::cell::RefCell::new(RandomPool { bytes: [0; RANDOM_POOL], used: RANDOM_POOL, pid: 0 })
    };
}

/// 16 random bytes from the operating system's generator, never handed out twice (neither in
/// another thread, nor in a forked child).
fn random_16() -> Result<[u8; 16], StoreError> {
    RANDOM.with_borrow_mut(|pool| {
        let pid = std::process::id();
        if pool.used + 16 > RANDOM_POOL || pool.pid != pid {
            getrandom::fill(&mut pool.bytes)
                .map_err(|e| StoreError::Other(format!("no randomness: {e}").into()))?;
            (pool.used, pool.pid) = (0, pid);
        }
        let mut out = [0; 16];
        out.copy_from_slice(&pool.bytes[pool.used..pool.used + 16]);
        pool.used += 16;
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_over_a_limit_is_too_large() {
        let c = Completion::new(Outcome::Completed, 200, vec![b'x'; 10])
            .with_headers(vec![("etag".to_owned(), b"\"v1\"".to_vec())])
            .with_biz_no("po_1");
        assert_eq!(c.stored_bytes(), 10 + 4 + 4 + 4);
        assert!(c.fits(22).is_ok());
        match c.fits(21) {
            Err(StoreError::TooLarge {
                bytes: 22,
                limit: 21,
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn operation_ids_are_uuid_v4() {
        let a = new_operation_id().unwrap();
        let b = new_operation_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn operation_ids_are_unique_across_refills_and_threads() {
        let ids: Vec<String> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..1000)
                            .map(|_| new_operation_id().unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), 4000);
    }
}
