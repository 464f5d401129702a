//! `ttl = "90d"`, `lease = "10s"`: durations read at compile time.
//!
//! A duration is one or more `<integer><unit>` terms, units largest first and each at most once
//! (`"1h30m"`), with the units `y` (365 days), `d`, `h`, `m`, `s` and `ms`. It must be positive and fit in a
//! `u64` of milliseconds; anything else is a compile error at the string.

use proc_macro2::TokenStream;
use quote::quote;

/// A positive duration, in milliseconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Millis(pub(crate) u64);

/// The units, largest first, with their length in milliseconds.
const UNITS: &[(&str, u64)] = &[
    ("y", 365 * 86_400_000),
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

const EXAMPLES: &str = "write a positive duration such as `7d`, `90s` or `500ms` (units `y` of 365 days, `d`, `h`, `m`, `s`, `ms`; combine them largest first, as in `1h30m`)";

/// Why a duration string was rejected; [`DurationError::message`] words it for `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DurationError {
    Empty,
    Negative,
    Zero,
    /// A number without a unit (`"90"`).
    MissingUnit(String),
    /// A unit that is not one of [`UNITS`] (`"2w"`).
    UnknownUnit(String),
    /// Units not largest first, or one given twice (`"30m1h"`).
    Order,
    Overflow,
    /// Anything else: `"1.5h"`, `"soon"`, `"1 h"`.
    Unreadable,
}

impl DurationError {
    pub(crate) fn message(&self, key: &str, text: &str) -> String {
        match self {
            DurationError::Empty => format!("`{key}` is empty: {EXAMPLES}"),
            DurationError::Negative => {
                format!("`{key}` cannot be negative (`{text}`): {EXAMPLES}")
            }
            DurationError::Zero => {
                let why = match key {
                    "lease" => {
                        "a zero lease would let every retry take over a handler that is still running"
                    }
                    "timeout" => "a zero timeout would stop every handler before it starts",
                    "wait" => "leave `wait` out not to wait",
                    "remember" => "leave `remember` out not to remember keys past their ttl",
                    _ => {
                        "a zero ttl would forget every key at once, so no retry would ever be recognized"
                    }
                };
                format!("`{key} = \"{text}\"` is zero: {why}; {EXAMPLES}")
            }
            DurationError::MissingUnit(number) => format!(
                "`{text}` has no unit: write e.g. `{number}s` or `{number}ms` (units `y`, `d`, `h`, `m`, `s`, `ms`)"
            ),
            DurationError::UnknownUnit(unit) => {
                format!("unknown unit `{unit}` in `{key} = \"{text}\"`: {EXAMPLES}")
            }
            DurationError::Order => {
                format!("`{text}`: write each unit once, largest first, as in `1h30m` or `2d12h`")
            }
            DurationError::Overflow => format!(
                "`{key} = \"{text}\"` is too long to represent (more than 2^64 milliseconds): {EXAMPLES}"
            ),
            DurationError::Unreadable => {
                format!("cannot read `{text}` as a duration: {EXAMPLES}")
            }
        }
    }
}

pub(crate) fn parse(text: &str) -> Result<Millis, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.starts_with('-') {
        return Err(DurationError::Negative);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // Index in `UNITS` that the next term's unit must be past.
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(DurationError::Unreadable);
        }
        let (number, after) = rest.split_at(digits);
        let letters = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, after) = after.split_at(letters);
        if unit.is_empty() {
            return Err(if after.is_empty() {
                DurationError::MissingUnit(number.to_owned())
            } else {
                DurationError::Unreadable
            });
        }
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(DurationError::UnknownUnit(unit.to_owned()));
        };
        if index < next_unit {
            return Err(DurationError::Order);
        }
        next_unit = index + 1;
        let value: u64 = number.parse().map_err(|_| DurationError::Overflow)?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or(DurationError::Overflow)?;
        rest = after;
    }
    if total == 0 {
        return Err(DurationError::Zero);
    }
    Ok(Millis(total))
}

impl Millis {
    /// `Duration::from_secs(n)` (whole seconds) or `Duration::from_millis(n)`, under `pv`.
    pub(crate) fn to_tokens(self, pv: &TokenStream) -> TokenStream {
        let Millis(ms) = self;
        if ms % 1000 == 0 {
            let secs = ms / 1000;
            quote!(#pv::Duration::from_secs(#secs))
        } else {
            quote!(#pv::Duration::from_millis(#ms))
        }
    }

    /// `7d`, `1h30m`, `1500ms`: for messages.
    pub(crate) fn display(self) -> String {
        let mut rest = self.0;
        let mut out = String::new();
        for (unit, len) in UNITS {
            if rest >= *len {
                out.push_str(&format!("{}{unit}", rest / len));
                rest %= len;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{DurationError::*, Millis, parse};

    #[test]
    fn reads_units_and_compounds() {
        assert_eq!(parse("500ms"), Ok(Millis(500)));
        assert_eq!(parse("90s"), Ok(Millis(90_000)));
        assert_eq!(parse("10m"), Ok(Millis(600_000)));
        assert_eq!(parse("24h"), Ok(Millis(86_400_000)));
        assert_eq!(parse("7d"), Ok(Millis(604_800_000)));
        assert_eq!(parse("1y"), Ok(Millis(31_536_000_000)));
        assert_eq!(parse("1y30d"), Ok(Millis(34_128_000_000)));
        assert_eq!(parse("1h30m"), Ok(Millis(5_400_000)));
        assert_eq!(parse("1d2h3m4s5ms"), Ok(Millis(93_784_005)));
        assert_eq!(parse("0d1s"), Ok(Millis(1_000)));
    }

    #[test]
    fn rejects_what_is_not_a_positive_duration() {
        assert_eq!(parse(""), Err(Empty));
        assert_eq!(parse("-5s"), Err(Negative));
        assert_eq!(parse("0s"), Err(Zero));
        assert_eq!(parse("0h0m"), Err(Zero));
        assert_eq!(parse("90"), Err(MissingUnit("90".into())));
        assert_eq!(parse("2w"), Err(UnknownUnit("w".into())));
        assert_eq!(parse("5sec"), Err(UnknownUnit("sec".into())));
        assert_eq!(parse("30m1h"), Err(Order));
        assert_eq!(parse("1s1s"), Err(Order));
        assert_eq!(parse("1.5h"), Err(Unreadable));
        assert_eq!(parse("1 h"), Err(Unreadable));
        assert_eq!(parse("soon"), Err(Unreadable));
        assert_eq!(parse("h"), Err(Unreadable));
        assert_eq!(parse("99999999999999999999d"), Err(Overflow));
        assert_eq!(parse("213503982335d"), Err(Overflow));
    }

    #[test]
    fn displays_largest_units_first() {
        assert_eq!(Millis(604_800_000).display(), "7d");
        assert_eq!(Millis(5_400_000).display(), "1h30m");
        assert_eq!(Millis(1_500).display(), "1s500ms");
    }
}
