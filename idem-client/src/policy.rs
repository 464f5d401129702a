//! What to retry, when, and for how long: one [`RetryPolicy`] for every client of idem.

use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, StatusCode};

use crate::parse_retry_after;

/// The header an idem server sets on every stored answer it sends again.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// When and how often a request is sent again, with the same key.
///
/// Backoff is exponential with full jitter: before retry `n` (1 for the first) the client waits
/// a uniformly random time between the floor of [`backoff`](Self::backoff) and `min(cap, floor * 2^n)`; a
/// `Retry-After` from the server replaces the backoff (capped by
/// [`max_retry_after`](Self::max_retry_after)). The budget is both a number of attempts and a
/// time since the first one: a wait that would end past the time budget is not started, and
/// the last answer is returned instead.
///
/// ```
/// use std::time::Duration;
/// use idem_client::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .max_attempts(8)
///     .max_elapsed(Duration::from_secs(60))
///     .backoff(Duration::from_millis(50), Duration::from_secs(2));
/// assert_eq!(policy.get_max_attempts(), 8);
/// ```
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    max_elapsed: Duration,
    floor: Duration,
    cap: Duration,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts within 30 s, backoff between 100 ms and 5 s, `Retry-After` capped at 30 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            max_elapsed: Duration::from_secs(30),
            floor: Duration::from_millis(100),
            cap: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// At most `n` attempts in all, the first included (`1`: never retry). Panics on `0`.
    pub fn max_attempts(mut self, n: u32) -> Self {
        assert!(
            n > 0,
            "max_attempts counts the first attempt: write 1 to never retry"
        );
        self.max_attempts = n;
        self
    }

    /// No retry starts later than `budget` after the first attempt.
    pub fn max_elapsed(mut self, budget: Duration) -> Self {
        self.max_elapsed = budget;
        self
    }

    /// The shortest and the longest backoff between two attempts. Panics if `floor > cap`.
    pub fn backoff(mut self, floor: Duration, cap: Duration) -> Self {
        assert!(floor <= cap, "the backoff floor must not exceed its cap");
        self.floor = floor;
        self.cap = cap;
        self
    }

    /// The longest wait a server's `Retry-After` may ask for; longer values are cut to it.
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.max_retry_after = cap;
        self
    }

    /// The attempts budget.
    pub fn get_max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The time budget.
    pub fn get_max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// The wait before retry number `retry` (1 for the first retry): `retry_after` if the
    /// server sent one (capped), otherwise the jittered backoff. `random` is a uniform sample
    /// of `u64` (the middleware draws it from the operating system).
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, random: u64) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(self.max_retry_after);
        }
        let ceiling = self
            .floor
            .saturating_mul(1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX))
            .min(self.cap);
        let span = (ceiling - self.floor).as_nanos() as u64;
        let offset = if span == 0 { 0 } else { random % (span + 1) };
        self.floor + Duration::from_nanos(offset)
    }

    /// Whether a wait of `wait` after `elapsed` since the first attempt, with `attempts` made,
    /// still fits the budget.
    pub fn allows(&self, attempts: u32, elapsed: Duration, wait: Duration) -> bool {
        attempts < self.max_attempts && elapsed.saturating_add(wait) <= self.max_elapsed
    }

    /// The wait before the next attempt, after `attempts` made since `started`, or `None` when
    /// the budget does not allow one: [`delay`](Self::delay) with the operating system's
    /// randomness, checked by [`allows`](Self::allows).
    pub(crate) fn next_wait(
        &self,
        attempts: u32,
        started: Instant,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        // A failure of the generator only loses the jitter.
        let wait = self.delay(attempts, retry_after, getrandom::u64().unwrap_or(0));
        self.allows(attempts, started.elapsed(), wait)
            .then_some(wait)
    }
}

/// What the client does with one answer of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The answer is final: a success, a stored answer, or a refusal that a retry would only
    /// repeat.
    Final,
    /// Send the request again with the same key, after the server's `Retry-After` if it sent
    /// one, otherwise after the policy's backoff.
    Retry {
        /// The parsed `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
}

/// The retry classification of an answer (the table of `docs/guides/clients.md`):
///
/// | answer | verdict | why |
/// |---|---|---|
/// | `Idempotent-Replayed: true`, any status | final | it is the stored answer: every retry gets it again |
/// | `1xx`-`3xx` | final | |
/// | `408` | retry | the server gave up reading the request; nothing ran |
/// | `409` with `Retry-After` | retry after it | the first attempt still runs; its answer is coming |
/// | `409` without `Retry-After` | final | the application's own conflict, not idem's |
/// | `429`, `503` | retry after `Retry-After` (or backoff) | the request was not run |
/// | `422` | final | the key was used for another request: a bug in the caller |
/// | `410` | final | (`key-expired`) the operation ran; its response expired and the server remembers the key |
/// | other `4xx` (`400`, `401`, `403`, `404`, ..) | final | the same request fails the same way |
/// | other `5xx` | retry (backoff) | a failure that was not stored (a stored one comes back replayed) |
///
/// ```
/// use std::time::{Duration, Instant, SystemTime};
/// use http::{HeaderMap, StatusCode};
/// use idem_client::{classify, Verdict};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "2".parse().unwrap());
/// assert_eq!(
///     classify(StatusCode::CONFLICT, &headers, SystemTime::now()),
///     Verdict::Retry { retry_after: Some(Duration::from_secs(2)) },
/// );
/// assert_eq!(classify(StatusCode::UNPROCESSABLE_ENTITY, &headers, SystemTime::now()), Verdict::Final);
/// ```
pub fn classify(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Verdict {
    if is_replayed(headers) {
        return Verdict::Final;
    }
    let retry_after = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, now));
    match status.as_u16() {
        408 | 429 | 503 => Verdict::Retry { retry_after },
        409 if retry_after.is_some() => Verdict::Retry { retry_after },
        500..=599 => Verdict::Retry { retry_after },
        _ => Verdict::Final,
    }
}

/// Whether the answer carries `Idempotent-Replayed: true`.
pub fn is_replayed(headers: &HeaderMap) -> bool {
    headers
        .get(IDEMPOTENT_REPLAYED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    fn verdict(status: u16, pairs: &[(&'static str, &str)]) -> Verdict {
        classify(
            StatusCode::from_u16(status).unwrap(),
            &headers(pairs),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
    }

    type Case = (u16, &'static [(&'static str, &'static str)], Verdict);

    const RETRY: Verdict = Verdict::Retry { retry_after: None };

    #[test]
    fn the_classification_table_status_by_status() {
        let two = Verdict::Retry {
            retry_after: Some(Duration::from_secs(2)),
        };
        let cases: &[Case] = &[
            (200, &[], Verdict::Final),
            (201, &[], Verdict::Final),
            (204, &[], Verdict::Final),
            (303, &[], Verdict::Final),
            (400, &[], Verdict::Final),
            (401, &[], Verdict::Final),
            (403, &[], Verdict::Final),
            (404, &[], Verdict::Final),
            (408, &[], RETRY),
            (409, &[("retry-after", "2")], two),
            (409, &[], Verdict::Final),
            (410, &[], Verdict::Final),
            (413, &[], Verdict::Final),
            (422, &[], Verdict::Final),
            (422, &[("retry-after", "2")], Verdict::Final),
            (429, &[], RETRY),
            (429, &[("retry-after", "2")], two),
            (500, &[], RETRY),
            (502, &[], RETRY),
            (503, &[("retry-after", "2")], two),
            (
                503,
                &[("retry-after", "Tue, 14 Nov 2023 22:13:22 GMT")],
                two,
            ),
            (503, &[("retry-after", "later")], RETRY),
            (504, &[], RETRY),
            // A stored answer is final whatever its status.
            (500, &[("idempotent-replayed", "true")], Verdict::Final),
            (
                503,
                &[("idempotent-replayed", "true"), ("retry-after", "2")],
                Verdict::Final,
            ),
            (
                409,
                &[("idempotent-replayed", "TRUE"), ("retry-after", "2")],
                Verdict::Final,
            ),
            (201, &[("idempotent-replayed", "true")], Verdict::Final),
            // Only `true` marks a replay.
            (500, &[("idempotent-replayed", "false")], RETRY),
        ];
        for (status, pairs, expected) in cases {
            assert_eq!(verdict(*status, pairs), *expected, "{status} {pairs:?}");
        }
    }

    #[test]
    fn backoff_stays_between_floor_and_the_doubling_ceiling() {
        let p = RetryPolicy::default().backoff(Duration::from_millis(100), Duration::from_secs(1));
        for retry in 1..40 {
            let ceiling = Duration::from_millis(100 << retry.min(4)).min(Duration::from_secs(1));
            for random in [0, 1, 12_345, u64::MAX / 3, u64::MAX - 1, u64::MAX] {
                let d = p.delay(retry, None, random);
                assert!(
                    d >= Duration::from_millis(100) && d <= ceiling,
                    "{retry} {random} {d:?}"
                );
            }
        }
        // The extremes are reached: the jitter is full, not a fixed fraction.
        let span = Duration::from_millis(100).as_nanos() as u64;
        assert_eq!(p.delay(1, None, 0), Duration::from_millis(100));
        assert_eq!(p.delay(1, None, span), Duration::from_millis(200));
        assert_eq!(p.delay(30, None, 900_000_000), Duration::from_secs(1));
    }

    #[test]
    fn a_floor_equal_to_the_cap_is_constant() {
        let p =
            RetryPolicy::default().backoff(Duration::from_millis(50), Duration::from_millis(50));
        assert_eq!(p.delay(3, None, 987_654_321), Duration::from_millis(50));
    }

    #[test]
    fn retry_after_replaces_the_backoff_and_is_capped() {
        let p = RetryPolicy::default().max_retry_after(Duration::from_secs(10));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3)), 0),
            Duration::from_secs(3)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3600)), 0),
            Duration::from_secs(10)
        );
        assert_eq!(p.delay(1, Some(Duration::ZERO), 0), Duration::ZERO);
    }

    #[test]
    fn budgets_of_attempts_and_time() {
        let p = RetryPolicy::default()
            .max_attempts(3)
            .max_elapsed(Duration::from_secs(10));
        assert!(p.allows(1, Duration::ZERO, Duration::from_secs(1)));
        assert!(p.allows(2, Duration::from_secs(8), Duration::from_secs(2)));
        assert!(
            !p.allows(3, Duration::ZERO, Duration::ZERO),
            "attempts spent"
        );
        assert!(
            !p.allows(1, Duration::from_secs(9), Duration::from_secs(2)),
            "time spent"
        );
        assert!(
            !RetryPolicy::default()
                .max_attempts(1)
                .allows(1, Duration::ZERO, Duration::ZERO)
        );
    }

    #[test]
    #[should_panic(expected = "write 1 to never retry")]
    fn zero_attempts_is_refused() {
        let _ = RetryPolicy::default().max_attempts(0);
    }
}
