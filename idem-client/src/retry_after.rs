//! `Retry-After` (RFC 9110, section 10.2.3): delta-seconds or an HTTP-date.

use std::time::{Duration, SystemTime};

/// The wait a `Retry-After` value asks for, seen at `now`.
///
/// Delta-seconds (`"3"`) are taken as they are; an HTTP-date (`"Wed, 21 Oct 2026 07:28:00
/// GMT"`, and the two obsolete forms RFC 9110 still requires recipients to accept) is the time
/// from `now` until then, zero if it has passed. Anything else (a negative or fractional number,
/// text) is `None`: the caller falls back to its own backoff rather than guessing.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use idem_client::parse_retry_after;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
/// assert_eq!(
///     parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now),
///     Some(Duration::from_secs(10)),
/// );
/// assert_eq!(parse_retry_after("soon", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurd values saturate instead of failing: the policy caps them anyway.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        // Tue, 14 Nov 2023 22:13:20 GMT
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(parse_retry_after("0", now()), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after(" 120 ", now()),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now()),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn http_dates_in_every_form() {
        let ten = Some(Duration::from_secs(10));
        assert_eq!(
            parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now()),
            ten
        );
        assert_eq!(
            parse_retry_after("Tuesday, 14-Nov-23 22:13:30 GMT", now()),
            ten
        );
        assert_eq!(parse_retry_after("Tue Nov 14 22:13:30 2023", now()), ten);
    }

    #[test]
    fn a_date_in_the_past_is_no_wait() {
        assert_eq!(
            parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now()),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn anything_else_is_none() {
        for bad in ["", "-1", "1.5", "soon", "3 s", "Tue, 14 Nov 2023"] {
            assert_eq!(parse_retry_after(bad, now()), None, "{bad:?}");
        }
    }
}
