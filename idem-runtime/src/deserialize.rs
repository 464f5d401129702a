//! Deserializers for request types' fields (feature `decimal`): `Decimal`s from JSON numbers and
//! strings alike, exactly.
//!
//! idem enables none of `rust_decimal`'s serde features (cargo would unify them into the
//! application's, changing how its own `Decimal`s deserialize): what a `Decimal` field accepts is
//! the application's choice — `serde-str` accepts only strings, `serde` strings and numbers through
//! an `f64` — while payment APIs commonly accept `"amount": 100.10` as well as
//! `"amount": "100.10"`, and must never round. [`decimal`] and [`option_decimal`] accept both,
//! exactly, whatever features the application chose:
//!
//! ```
//! use rust_decimal::Decimal;
//!
//! #[derive(serde::Deserialize)]
//! struct CreatePayment {
//!     #[serde(deserialize_with = "idem_runtime::deserialize::decimal")]
//!     amount: Decimal,
//!     #[serde(default, deserialize_with = "idem_runtime::deserialize::option_decimal")]
//!     fee: Option<Decimal>,
//! }
//!
//! let a: CreatePayment = serde_json::from_str(r#"{"amount": 100.10}"#).unwrap();
//! let b: CreatePayment = serde_json::from_str(r#"{"amount": "100.10", "fee": "0.5"}"#).unwrap();
//! assert_eq!(a.amount, b.amount);
//! assert_eq!(b.amount.to_string(), "100.10"); // a string keeps its scale
//! assert_eq!(b.fee, Some(Decimal::new(5, 1)));
//! assert!(serde_json::from_str::<CreatePayment>(r#"{"amount": "1O0"}"#).is_err());
//! ```
//!
//! **Exactness.** Strings are always exact (up to `Decimal`'s 28 significant digits: more is an
//! error, never a silent rounding), and so are JSON integers that fit an `i64` or `u64`. Any other
//! JSON number is exact when `serde_json`'s `arbitrary_precision` feature is on (its text is
//! parsed); without it `serde_json` has already parsed it as an `f64`, whose shortest round-trip
//! text is used: exact for up to 15 significant digits (every realistic amount), possibly off in
//! the 16th and 17th. From 2^53 on (about 9.007e15) an `f64` no longer holds every integer, so
//! such a number — an integer past `u64`, such as a 25-digit one, or `1e20` — is refused rather
//! than rounded: two amounts 1 apart would otherwise arrive as one, and hash as one request. A
//! number below the `f64` range (`1e-400`) arrives as `0`, which nothing here can tell from a
//! real `0`. Send long or extreme amounts as strings. The derive hashes the parsed `Decimal`
//! (the tower layer the raw body, exactly), so what is lost here is lost to the fingerprint too.

use core::fmt;

use rust_decimal::Decimal;
use serde::Deserializer;
use serde::de::{self, MapAccess, Visitor};

/// The key under which `serde_json` (feature `arbitrary_precision`) hands a number's text to
/// `deserialize_any`.
const SERDE_JSON_NUMBER: &str = "$serde_json::private::Number";

/// Deserializes a [`Decimal`] from a JSON number or a decimal string (`"100.10"`, `"1e2"`).
/// Use with `#[serde(deserialize_with = "idem::deserialize::decimal")]`; see the [module](self) docs.
///
/// # Errors
/// A string that is not a decimal number, more than 28 significant digits, or another JSON type.
///
/// ```
/// use serde::de::IntoDeserializer;
/// use serde::de::value::{Error, StrDeserializer};
/// let d: StrDeserializer<'_, Error> = "12.50".into_deserializer();
/// assert_eq!(idem_runtime::deserialize::decimal(d).unwrap().to_string(), "12.50");
/// ```
pub fn decimal<'de, D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
    d.deserialize_any(DecimalVisitor)
}

/// [`decimal`] for an `Option<Decimal>`: `null` (or an absent field with `#[serde(default)]`) is
/// `None`.
///
/// # Errors
/// As [`decimal`].
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Fee {
///     #[serde(default, deserialize_with = "idem_runtime::deserialize::option_decimal")]
///     fee: Option<rust_decimal::Decimal>,
/// }
/// assert!(serde_json::from_str::<Fee>(r#"{"fee": null}"#).unwrap().fee.is_none());
/// assert!(serde_json::from_str::<Fee>(r#"{}"#).unwrap().fee.is_none());
/// assert_eq!(serde_json::from_str::<Fee>(r#"{"fee": 2}"#).unwrap().fee, Some(2.into()));
/// ```
pub fn option_decimal<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Decimal>, D::Error> {
    d.deserialize_option(OptionVisitor)
}

struct DecimalVisitor;

/// 2^53: from here on an `f64` no longer holds every integer, so a JSON number that reached us as
/// one may have lost digits.
const F64_EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;

fn parse<E: de::Error>(text: &str) -> Result<Decimal, E> {
    let parsed = if text.contains(['e', 'E']) {
        Decimal::from_scientific(text)
    } else {
        Decimal::from_str_exact(text)
    };
    parsed.map_err(|e| {
        E::custom(format_args!(
            "`{text}` is not an exact decimal number ({e}): send digits with an optional `.` and exponent, at most 28 significant digits, e.g. \"100.00\""
        ))
    })
}

impl<'de> Visitor<'de> for DecimalVisitor {
    type Value = Decimal;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a decimal number or a string holding one, e.g. 100.10 or \"100.10\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Decimal, E> {
        parse(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Decimal, E> {
        Ok(Decimal::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Decimal, E> {
        Ok(Decimal::from(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Decimal, E> {
        Decimal::try_from_i128_with_scale(v, 0)
            .map_err(|_| E::custom(format_args!("{v} is out of range for a decimal")))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Decimal, E> {
        i128::try_from(v)
            .map_err(|_| E::custom(format_args!("{v} is out of range for a decimal")))
            .and_then(|v| self.visit_i128(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Decimal, E> {
        if !v.is_finite() {
            return Err(E::custom(format_args!("{v} is not a decimal number")));
        }
        if v.abs() >= F64_EXACT_INTEGERS {
            // serde_json hands integers past u64 over as a rounded f64: refused, not rounded.
            return Err(E::custom(format_args!(
                "a JSON number of {v:e} cannot be read exactly (an f64 holds every integer only up to 2^53): send it as a string, e.g. \"12345678901234567890123\""
            )));
        }
        // Rust's `Display` of an f64 is its shortest round-trip text, never in exponent form.
        parse(&v.to_string())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decimal, A::Error> {
        // serde_json with `arbitrary_precision`: `{"$serde_json::private::Number": "<text>"}`.
        match map.next_key::<String>()? {
            Some(k) if k == SERDE_JSON_NUMBER => {
                let text: String = map.next_value()?;
                parse(&text)
            }
            _ => Err(de::Error::invalid_type(de::Unexpected::Map, &self)),
        }
    }
}

struct OptionVisitor;

impl<'de> Visitor<'de> for OptionVisitor {
    type Value = Option<Decimal>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null, a decimal number, or a string holding one")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<Decimal>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<Decimal>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<Decimal>, D::Error> {
        decimal(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use core::str::FromStr;

    use super::*;

    #[derive(serde::Deserialize)]
    struct Amount {
        #[serde(deserialize_with = "decimal")]
        amount: Decimal,
    }

    fn amount(json: &str) -> Result<Decimal, serde_json::Error> {
        serde_json::from_str::<Amount>(json).map(|a| a.amount)
    }

    #[test]
    fn numbers_and_strings() {
        let d = |s: &str| Decimal::from_str(s).unwrap();
        assert_eq!(amount(r#"{"amount":100}"#).unwrap(), d("100"));
        assert_eq!(amount(r#"{"amount":-7}"#).unwrap(), d("-7"));
        assert_eq!(amount(r#"{"amount":100.10}"#).unwrap(), d("100.1"));
        assert_eq!(amount(r#"{"amount":0.1}"#).unwrap(), d("0.1"));
        assert_eq!(amount(r#"{"amount":1e2}"#).unwrap(), d("100"));
        assert_eq!(
            amount(r#"{"amount":"100.10"}"#).unwrap().to_string(),
            "100.10"
        );
        assert_eq!(amount(r#"{"amount":"1.5e3"}"#).unwrap(), d("1500"));
        assert_eq!(
            amount(r#"{"amount":"12345678901234567890.12345678"}"#)
                .unwrap()
                .to_string(),
            "12345678901234567890.12345678"
        );
        assert_eq!(
            amount(r#"{"amount":18446744073709551615}"#).unwrap(),
            d("18446744073709551615")
        );
    }

    #[test]
    fn rejections() {
        for bad in [
            r#"{"amount":"1O0"}"#,
            r#"{"amount":""}"#,
            r#"{"amount":true}"#,
            r#"{"amount":null}"#,
            r#"{"amount":[1]}"#,
            r#"{"amount":{"a":1}}"#,
            r#"{"amount":"123456789012345678901234567890.1"}"#,
            // Past u64: serde_json rounds them to an f64 (both read 1234567890123456800000000).
            r#"{"amount":1234567890123456789012345}"#,
            r#"{"amount":1234567890123456789012346}"#,
            r#"{"amount":-1234567890123456789012345}"#,
            r#"{"amount":9007199254740992.5}"#,
            r#"{"amount":1e20}"#,
            r#"{"amount":1e400}"#,
        ] {
            assert!(amount(bad).is_err(), "{bad}");
        }
        // Below 2^53 an f64 is still exact for what fits 15 digits; as strings, anything fits.
        assert_eq!(
            amount(r#"{"amount":123456789012.345}"#).unwrap(),
            Decimal::from_str("123456789012.345").unwrap()
        );
        assert_eq!(
            amount(r#"{"amount":9.007199254740e15}"#).unwrap(),
            Decimal::from(9_007_199_254_740_000_i64)
        );
        assert_eq!(
            amount(r#"{"amount":"1234567890123456789012345"}"#)
                .unwrap()
                .to_string(),
            "1234567890123456789012345"
        );
        let msg = amount(r#"{"amount":1234567890123456789012345}"#)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("send it as a string"), "{msg}");
        let msg = amount(r#"{"amount":"abc"}"#).unwrap_err().to_string();
        assert!(msg.contains("not an exact decimal"), "{msg}");
    }

    #[test]
    fn arbitrary_precision_map_form() {
        use serde::de::value::{Error, MapDeserializer};
        let map = MapDeserializer::<_, Error>::new([(SERDE_JSON_NUMBER, "100.10")].into_iter());
        let got = decimal(map).unwrap();
        assert_eq!(got.to_string(), "100.10");
    }
}
