//! Times as `idem` prints them: RFC 3339 in UTC with milliseconds, and relative to "now".
//!
//! The rule: every time is milliseconds since the Unix epoch by the database's clock, and "now"
//! is the database's too, read with the record, never this machine's.

use serde::Serializer;

/// Milliseconds since the Unix epoch as RFC 3339 (UTC, always three decimals); a time past
/// the year 9999 (a corrupt row) as its number.
pub(crate) fn rfc3339(ms: i64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'_>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::UtcDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| format!("{ms} ms since the Unix epoch"))
}

pub(crate) fn as_rfc3339<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*ms))
}

/// [`as_rfc3339`] of a time that may be absent (`null`).
pub(crate) fn as_rfc3339_opt<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_str(&rfc3339(*ms)),
        None => s.serialize_none(),
    }
}

/// A signed duration in ms, as `in 1h 2m 3s` / `4s ago`.
pub(crate) fn relative(ms: i64) -> String {
    let mut s = ms.unsigned_abs() / 1000;
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    s %= 60;
    let text = match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m {s}s"),
        _ => format!("{d}d {h}h {m}m"),
    };
    if ms >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

pub(crate) fn time(ms: i64, now: i64) -> String {
    format!("{} ({})", rfc3339(ms), relative(ms - now))
}
