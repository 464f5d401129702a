//! Time for the stores: [`Timestamp`] (milliseconds since the Unix epoch) and [`Clock`].
//!
//! The rule: the database's clock decides. The SQL and Redis stores compute "now" on the
//! server in every statement and never compare a record with the application's time;
//! `with_clock` overrides it for tests only. The memory store reads its injected [`Clock`].
//!
//! Why, and what the override costs in production: `docs/storage.md`, "Clocks".

use core::fmt;
use core::time::Duration;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A point in time: whole milliseconds since the Unix epoch (UTC), the representation of every
/// time column of the stores (`BIGINT`).
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::store::Timestamp;
/// let t = Timestamp::from_millis(1_000);
/// assert_eq!(t + Duration::from_secs(2), Timestamp::from_millis(3_000));
/// assert_eq!(Timestamp::from_millis(3_000).saturating_duration_since(t), Duration::from_secs(2));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// Wraps milliseconds since the Unix epoch.
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating at the largest representable time.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_millis(d)))
    }

    /// `self - earlier`, or zero when `earlier` is later than `self`.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// The same instant as a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_millis(self.0 as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(self.0.unsigned_abs())
        }
    }

    /// A [`SystemTime`] truncated to whole milliseconds.
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(duration_millis(d)),
            Err(e) => Timestamp(-duration_millis(e.duration())),
        }
    }
}

impl core::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        self.saturating_add(d)
    }
}

impl core::ops::Sub<Duration> for Timestamp {
    type Output = Timestamp;
    fn sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_millis(d)))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}ms)", self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

impl Timestamp {
    /// The time in RFC 3339, UTC, to the millisecond (`2026-12-07T02:29:12.345Z`): how problem
    /// documents and the CLI write it.
    ///
    /// ```
    /// use idem_runtime::store::Timestamp;
    /// assert_eq!(Timestamp::from_millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
    /// assert_eq!(Timestamp::from_millis(1_796_610_552_345).to_rfc3339(), "2026-12-07T02:29:12.345Z");
    /// ```
    pub fn to_rfc3339(self) -> String {
        let (days, ms) = (self.0.div_euclid(86_400_000), self.0.rem_euclid(86_400_000));
        let (year, month, day) = crate::encode::datetime::civil_from_days(days);
        let (secs, ms) = (ms / 1000, ms % 1000);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

/// Whole milliseconds of `d`, saturating at `i64::MAX`.
pub(crate) fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).map_or(MAX_DURATION_MS, |ms| ms.min(MAX_DURATION_MS))
}

/// The longest TTL or lease a store counts: 1,000 years. Every store keeps times as ms since
/// the Unix epoch in a signed 64-bit integer and adds durations to "now" in the database (SQL,
/// a Redis script): a `Duration` near its maximum would overflow there, and every claim of the
/// handler would fail. A longer one counts as this long, which is as good as for ever.
pub const MAX_DURATION: Duration = Duration::from_secs(1_000 * 365 * 86_400);

const MAX_DURATION_MS: i64 = MAX_DURATION.as_millis() as i64;

/// A source of the current time: the memory store's clock, and the override of a SQL store's
/// (database) clock in tests. Inject a [`ManualClock`] to move time without sleeping.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock ([`SystemTime::now`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }
}

/// A clock that only moves when told to; shared between a test and the store under test through
/// an `Arc`.
///
/// ```
/// use core::time::Duration;
/// use idem_runtime::store::{Clock, ManualClock, Timestamp};
/// let clock = ManualClock::new(Timestamp::from_millis(10));
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.now(), Timestamp::from_millis(15));
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock(AtomicI64::new(start.as_millis()))
    }

    /// A clock stopped at the current wall-clock time (handy against a shared database, where
    /// records of other tests live in real time).
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now())
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(duration_millis(d), Ordering::SeqCst);
    }

    /// Sets the clock to `t` (also backwards).
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.as_millis(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}
