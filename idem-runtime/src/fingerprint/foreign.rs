//! [`Canonical`] for types of other crates: `serde_json` (always), `rust_decimal` (feature
//! `decimal`), `uuid` (feature `uuid`), `chrono` (feature `chrono`), `time` (feature `time`),
//! `prost_types` (feature `prost`).
//!
//! Each `value_spec()` names the run-time spec under which `serde_json::to_value(&x)` of the
//! type's own serde form canonicalizes to the same bytes. None of them allocates.

use super::{Canonical, CanonicalWriter};
use crate::json::ValueSpec;

/// The general rules: objects sorted by member name with null members omitted, numbers exact.
///
/// A number is written from its text; a number whose text has no canonical form (possible only
/// with serde_json's `arbitrary_precision` feature: more than 1100 zeros, e.g. `1e2000`) is
/// written as a JSON string of its text, so that it still fingerprints deterministically (the
/// run-time canonicalizer rejects such a number with `number_out_of_range` instead).
///
/// ```
/// use idem_runtime::CanonicalWriter;
/// use idem_runtime::Canonical;
/// let v = serde_json::json!({"b": [1.50, null], "a": "x", "z": null});
/// let mut out = Vec::new();
/// v.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#"{"a":"x","b":[1.5,null]}"#);
/// ```
impl Canonical for serde_json::Value {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        use serde_json::Value;
        match self {
            Value::Null => w.null(),
            Value::Bool(b) => w.bool(*b),
            Value::Number(n) => n.write_canonical(w),
            Value::String(s) => w.str(s),
            Value::Array(items) => w.array(items),
            Value::Object(map) => map.write_canonical(w),
        }
    }
    #[inline]
    fn is_null(&self) -> bool {
        matches!(self, serde_json::Value::Null)
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

/// An object: members sorted by name, null members omitted. serde_json's default map iterates in
/// byte order already, so nothing is sorted or allocated; with serde_json's `preserve_order`
/// feature the members are sorted first.
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let serde_json::Value::Object(map) = serde_json::json!({"b": 1, "a": null, "B": 2}) else { unreachable!() };
/// let mut out = Vec::new();
/// map.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#"{"B":2,"b":1}"#);
/// ```
impl Canonical for serde_json::Map<String, serde_json::Value> {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.object_entries_presorted(self.iter().map(|(k, v)| (k.as_str(), v)));
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

/// An exact decimal: `1e2` and `100.0` are `100`; see [`serde_json::Value`]'s impl for numbers
/// beyond range.
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let n: serde_json::Number = serde_json::from_str("1.50e1").unwrap();
/// let mut out = Vec::new();
/// n.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, b"15");
/// ```
impl Canonical for serde_json::Number {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        let start = w.position();
        if crate::encode::number::write_json_number(w, self).is_err() {
            w.rewind(start);
            w.str(&self.to_string());
        }
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

/// An exact decimal from its mantissa and scale: `100.00` is `100`, `-0.0` is `0`. Its serde form
/// (the string `"100.00"`) canonicalizes alike under [`ValueSpec::Decimal`].
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let d = rust_decimal::Decimal::new(10000, 2); // 100.00
/// let mut out = Vec::new();
/// d.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, b"100");
/// ```
#[cfg(feature = "decimal")]
#[cfg_attr(docsrs, doc(cfg(feature = "decimal")))]
impl Canonical for rust_decimal::Decimal {
    #[inline]
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.decimal(self.mantissa(), self.scale());
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Decimal
    }
}

/// Lowercase hyphenated: `"67e55044-10b1-426f-9247-bb680e5fe0c8"`.
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let id = uuid::Uuid::from_u128(0x67E55044_10B1_426F_9247_BB680E5FE0C8);
/// let mut out = Vec::new();
/// id.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""67e55044-10b1-426f-9247-bb680e5fe0c8""#);
/// ```
#[cfg(feature = "uuid")]
#[cfg_attr(docsrs, doc(cfg(feature = "uuid")))]
impl Canonical for uuid::Uuid {
    #[inline]
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        crate::encode::scalar::write_uuid(w, self.as_bytes());
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Uuid
    }
}

/// In UTC, `"YYYY-MM-DDTHH:MM:SS[.fraction]Z"` without trailing fractional zeros, whatever the
/// time zone (`Utc`, `FixedOffset`, `Local`, ...). A leap second is written as second 60.
///
/// ```
/// use chrono::{FixedOffset, TimeZone};
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let t = FixedOffset::east_opt(3600).unwrap()
///     .with_ymd_and_hms(2024, 1, 2, 3, 4, 5).unwrap();
/// let mut out = Vec::new();
/// t.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""2024-01-02T02:04:05Z""#);
/// ```
#[cfg(feature = "chrono")]
#[cfg_attr(docsrs, doc(cfg(feature = "chrono")))]
impl<Tz: chrono::TimeZone> Canonical for chrono::DateTime<Tz> {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        use chrono::{Datelike, Timelike};
        let t = self.naive_utc();
        let (second, nanos) = match t.nanosecond() {
            n if n >= 1_000_000_000 => (60, n - 1_000_000_000),
            n => (t.second(), n),
        };
        crate::encode::datetime::Timestamp {
            year: i64::from(t.year()),
            month: t.month(),
            day: t.day(),
            hour: t.hour(),
            minute: t.minute(),
            second,
            nanos,
        }
        .write(w);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Timestamp
    }
}

/// `"YYYY-MM-DD"`.
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let d = chrono::NaiveDate::from_ymd_opt(2024, 2, 29).unwrap();
/// let mut out = Vec::new();
/// d.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""2024-02-29""#);
/// ```
#[cfg(feature = "chrono")]
#[cfg_attr(docsrs, doc(cfg(feature = "chrono")))]
impl Canonical for chrono::NaiveDate {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        use chrono::Datelike;
        crate::encode::datetime::write_date(w, i64::from(self.year()), self.month(), self.day());
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Date
    }
}

/// In UTC, `"YYYY-MM-DDTHH:MM:SS[.fraction]Z"` without trailing fractional zeros.
///
/// Its serde form is a string only with time's `serde-human-readable` feature
/// (`"2024-01-02 3:04:05.12 +01:00:00"`-like, accepted by [`ValueSpec::Timestamp`]) or with
/// `#[serde(with = "time::serde::rfc3339")]`; time's default serde form is a tuple of numbers,
/// which the run-time spec rejects.
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// use time::macros::datetime;
/// let t = datetime!(2024-01-02 03:04:05.120 +01:00);
/// let mut out = Vec::new();
/// t.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""2024-01-02T02:04:05.12Z""#);
/// ```
#[cfg(feature = "time")]
#[cfg_attr(docsrs, doc(cfg(feature = "time")))]
impl Canonical for time::OffsetDateTime {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        let local = crate::encode::datetime::Timestamp {
            year: i64::from(self.year()),
            month: u32::from(u8::from(self.month())),
            day: u32::from(self.day()),
            hour: u32::from(self.hour()),
            minute: u32::from(self.minute()),
            second: u32::from(self.second()),
            nanos: self.nanosecond(),
        };
        local
            .to_utc(i64::from(self.offset().whole_seconds()))
            .write(w);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Timestamp
    }
}

/// `"YYYY-MM-DDTHH:MM:SS[.fraction]Z"` without trailing fractional zeros. (Its human-readable
/// serde form has no offset; [`ValueSpec::Timestamp`] reads a missing offset as UTC.)
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// use time::macros::utc_datetime;
/// let t = utc_datetime!(2024-01-02 03:04:05);
/// let mut out = Vec::new();
/// t.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""2024-01-02T03:04:05Z""#);
/// ```
#[cfg(feature = "time")]
#[cfg_attr(docsrs, doc(cfg(feature = "time")))]
impl Canonical for time::UtcDateTime {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        crate::encode::datetime::Timestamp {
            year: i64::from(self.year()),
            month: u32::from(u8::from(self.month())),
            day: u32::from(self.day()),
            hour: u32::from(self.hour()),
            minute: u32::from(self.minute()),
            second: u32::from(self.second()),
            nanos: self.nanosecond(),
        }
        .write(w);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Timestamp
    }
}

/// `"YYYY-MM-DD"`. (Its serde form is a string only with time's `serde-human-readable`
/// feature.)
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// use time::macros::date;
/// let mut out = Vec::new();
/// date!(2024-01-02).write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""2024-01-02""#);
/// ```
#[cfg(feature = "time")]
#[cfg_attr(docsrs, doc(cfg(feature = "time")))]
impl Canonical for time::Date {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        crate::encode::datetime::write_date(
            w,
            i64::from(self.year()),
            u32::from(u8::from(self.month())),
            u32::from(self.day()),
        );
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Date
    }
}

/// In UTC, `"YYYY-MM-DDTHH:MM:SS[.fraction]Z"` without trailing fractional zeros, as the other
/// timestamps (and as the proto JSON mapping writes it, up to those zeros), after normalizing
/// `nanos` into `0..1_000_000_000` as [`prost_types::Timestamp::normalize`] does. A timestamp
/// outside years 0001..9999, which proto JSON cannot write, is still written deterministically,
/// its year in ISO 8601's expanded form (`"+10000-01-01T00:00:00Z"`).
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let t = prost_types::Timestamp { seconds: 1_704_164_645, nanos: 120_000_000 };
/// let mut out = Vec::new();
/// t.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""2024-01-02T03:04:05.12Z""#);
/// ```
#[cfg(feature = "prost")]
#[cfg_attr(docsrs, doc(cfg(feature = "prost")))]
impl Canonical for prost_types::Timestamp {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        let t = self.normalized();
        let (year, month, day) =
            crate::encode::datetime::civil_from_days(t.seconds.div_euclid(86_400));
        let tod = t.seconds.rem_euclid(86_400) as u32;
        crate::encode::datetime::Timestamp {
            year,
            month,
            day,
            hour: tod / 3600,
            minute: tod / 60 % 60,
            second: tod % 60,
            nanos: t.nanos as u32,
        }
        .write(w);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Timestamp
    }
}

/// A string of seconds with an `s` suffix, as the proto JSON mapping writes a duration, with the
/// fraction of a second (if any) without trailing zeros: `"1.5s"`, `"-0.000000001s"`, `"0s"`,
/// after normalizing `seconds` and `nanos` to the same sign as
/// [`prost_types::Duration::normalize`] does.
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter};
/// let d = prost_types::Duration { seconds: 1, nanos: 500_000_000 };
/// let mut out = Vec::new();
/// d.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#""1.5s""#);
/// ```
#[cfg(feature = "prost")]
#[cfg_attr(docsrs, doc(cfg(feature = "prost")))]
impl Canonical for prost_types::Duration {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        let d = self.normalized();
        // `"`, `-`, 20 digits, `.`, 9 digits, `s"`.
        let mut buf = [0u8; 34];
        let mut len = 0;
        let mut put = |bytes: &[u8]| {
            buf[len..len + bytes.len()].copy_from_slice(bytes);
            len += bytes.len();
        };
        put(b"\"");
        if d.seconds < 0 || d.nanos < 0 {
            put(b"-");
        }
        put(itoa::Buffer::new()
            .format(d.seconds.unsigned_abs())
            .as_bytes());
        let mut nanos = d.nanos.unsigned_abs();
        if nanos > 0 {
            let mut digits = [b'0'; 9];
            for digit in digits.iter_mut().rev() {
                *digit = b'0' + (nanos % 10) as u8;
                nanos /= 10;
            }
            let significant = 9 - digits.iter().rev().take_while(|&&d| d == b'0').count();
            put(b".");
            put(&digits[..significant]);
        }
        put(b"s\"");
        w.raw(&buf[..len]);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

/// A request URI (axum's `Uri` and `OriginalUri` arguments of an `#[idempotent]` handler): the
/// string of its path and query, as the client sent them (`/payouts?dry_run=true`). Two
/// spellings of one resource are two requests: at worst a retry that changes the spelling gets
/// `422`, never another request's answer.
///
/// ```
/// use idem_runtime::{Fingerprint, RequestHash};
/// let uri: http::Uri = "/payouts?dry_run=true".parse().unwrap();
/// assert_eq!(uri.fingerprint(), RequestHash::of_bytes(br#""/payouts?dry_run=true""#));
/// ```
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl Canonical for http::Uri {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        match self.path_and_query() {
            Some(pq) => w.str(pq.as_str()),
            None => w.str(self.path()),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each impl against the run-time canonicalizer over the type's own serde form: through
    //! `serde_json::to_value` and through the serialized bytes.

    use serde::Serialize;

    use super::*;
    use crate::fingerprint::fields::{Base64Field, FloatField};
    use crate::json::{Spec, canonicalize, canonicalize_slice};

    fn typed(write: impl FnOnce(&mut CanonicalWriter<'_>), is_null: bool) -> String {
        if is_null {
            return "{}".to_owned();
        }
        let mut out = b"{\"v\":".to_vec();
        write(&mut CanonicalWriter::new(&mut out));
        out.push(b'}');
        String::from_utf8(out).unwrap()
    }

    fn runtime<T: Serialize + ?Sized>(x: &T, spec: ValueSpec, value_path: bool) -> String {
        #[derive(Serialize)]
        struct Wrap<'a, T: ?Sized> {
            v: &'a T,
        }
        let spec = Spec::new().field("v", spec);
        let bytes = serde_json::to_vec(&Wrap { v: x }).unwrap();
        let raw = canonicalize_slice(&bytes, &spec).unwrap();
        if value_path {
            let value = serde_json::to_value(Wrap { v: x }).unwrap();
            assert_eq!(canonicalize(&value, &spec).unwrap(), raw, "value path");
        }
        raw
    }

    #[track_caller]
    fn check<T: Canonical + Serialize + ?Sized>(x: &T) {
        let want = typed(|w| x.write_canonical(w), x.is_null());
        assert_eq!(runtime(x, T::value_spec(), true), want);
    }

    #[test]
    fn json_values() {
        for v in [
            serde_json::json!({"b": [1, 2.5, null, {"z": null, "y": -0.0}], "a": "\u{1}é"}),
            serde_json::json!(null),
            serde_json::json!(1e300),
            serde_json::json!(u64::MAX),
            serde_json::json!(i64::MIN),
            serde_json::json!(0.1),
        ] {
            check(&v);
            if let serde_json::Value::Number(n) = &v {
                check(n);
            }
            if let serde_json::Value::Object(m) = &v {
                check(m);
            }
        }
    }

    #[test]
    fn floats_and_bytes_match_their_runtime_specs() {
        for x in [
            0.1_f64,
            100.0,
            -0.0,
            1e21,
            1.5e-7,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
        ] {
            let want = typed(|w| x.write_float(w), FloatField::is_null(&x));
            assert_eq!(
                runtime(&x, <f64 as FloatField>::value_spec(), true),
                want,
                "{x}"
            );
        }
        for x in [Some(f64::NAN), None, Some(2.5)] {
            let want = typed(|w| x.write_float(w), FloatField::is_null(&x));
            assert_eq!(
                runtime(&x, <Option<f64> as FloatField>::value_spec(), true),
                want
            );
        }
        let xs = vec![1.0_f64, f64::INFINITY, 0.3];
        let want = typed(|w| xs.write_float(w), false);
        assert_eq!(
            runtime(&xs, <Vec<f64> as FloatField>::value_spec(), true),
            want
        );
        // serde_json widens an `f32` to `f64` in a `Value` (0.1f32 becomes 0.10000000149011612),
        // so only the serialized bytes agree with the `f32`'s own shortest text.
        for x in [0.1_f32, 3.4028235e38, 1e-45] {
            let want = typed(|w| x.write_float(w), false);
            assert_eq!(
                runtime(&x, <f32 as FloatField>::value_spec(), false),
                want,
                "{x}"
            );
        }
        for b in [vec![], vec![0_u8], b"hi!?".to_vec(), (0..=255).collect()] {
            let want = typed(|w| b.write_base64(w), false);
            assert_eq!(
                runtime(&b, <Vec<u8> as Base64Field>::value_spec(), true),
                want
            );
        }
    }

    #[cfg(feature = "decimal")]
    #[test]
    fn decimals() {
        use rust_decimal::Decimal;
        for d in [
            Decimal::new(10000, 2),
            Decimal::new(-0, 3),
            Decimal::new(10, 2),
            Decimal::new(1, 28),
            Decimal::new(-123_456, 3),
            Decimal::MAX,
            Decimal::MIN,
        ] {
            check(&d);
        }
    }

    #[cfg(feature = "uuid")]
    #[test]
    fn uuids() {
        check(&uuid::Uuid::from_u128(
            0x67E55044_10B1_426F_9247_BB680E5FE0C8,
        ));
        check(&uuid::Uuid::nil());
        check(&uuid::Uuid::max());
    }

    #[cfg(feature = "chrono")]
    #[test]
    fn chrono_types() {
        use chrono::{DateTime, FixedOffset, NaiveDate, TimeZone, Utc};
        let utc = Utc.with_ymd_and_hms(2024, 1, 2, 3, 4, 5).unwrap();
        for nanos in [0, 120_000_000, 123_456_789, 1, 1_500_000_000] {
            let t = utc + chrono::Duration::nanoseconds(i64::from(nanos % 1_000_000_000));
            check(&t);
            let t = t.with_timezone(&FixedOffset::west_opt(5 * 3600 + 30 * 60).unwrap());
            check(&t);
        }
        let t: DateTime<Utc> = "2024-01-02T03:04:05.120Z".parse().unwrap();
        assert_eq!(
            typed(|w| t.write_canonical(w), false),
            r#"{"v":"2024-01-02T03:04:05.12Z"}"#
        );
        assert_eq!(
            serde_json::to_value(t).unwrap(),
            serde_json::json!("2024-01-02T03:04:05.120Z")
        );
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_milli_opt(23, 59, 59, 1_500)
            .unwrap()
            .and_utc();
        check(&leap);
        assert_eq!(
            typed(|w| leap.write_canonical(w), false),
            r#"{"v":"2016-12-31T23:59:60.5Z"}"#
        );
        check(&NaiveDate::from_ymd_opt(2024, 2, 29).unwrap());
        check(&Some(NaiveDate::from_ymd_opt(1, 1, 1).unwrap()));
        check(&None::<NaiveDate>);
    }

    #[cfg(feature = "time")]
    #[test]
    fn time_types() {
        use time::macros::{date, datetime, utc_datetime};
        for t in [
            datetime!(2024-01-02 03:04:05 UTC),
            datetime!(2024-01-02 03:04:05.120 +01:00),
            datetime!(2024-01-01 00:30:00.000000001 +05:45),
            datetime!(2023-12-31 23:30:00 -01:00:30),
        ] {
            check(&t);
        }
        check(&utc_datetime!(2024-01-02 03:04:05.5));
        check(&utc_datetime!(2024-01-02 03:04:05));
        check(&date!(2024 - 02 - 29));
    }

    #[cfg(feature = "prost")]
    #[test]
    fn prost_types() {
        use prost_types::{Duration, Timestamp};
        let text = |x: &dyn Fn(&mut CanonicalWriter<'_>)| typed(x, false);
        for (seconds, nanos, want) in [
            (1_704_164_645, 0, "2024-01-02T03:04:05Z"),
            (1_704_164_645, 120_000_000, "2024-01-02T03:04:05.12Z"),
            (0, 0, "1970-01-01T00:00:00Z"),
            (-1, 999_999_999, "1969-12-31T23:59:59.999999999Z"),
            // Not normalized: the same instants.
            (0, -1, "1969-12-31T23:59:59.999999999Z"),
            (1_704_164_644, 1_120_000_000, "2024-01-02T03:04:05.12Z"),
            (-62_135_596_800, 0, "0001-01-01T00:00:00Z"),
            (
                253_402_300_799,
                999_999_999,
                "9999-12-31T23:59:59.999999999Z",
            ),
            (253_402_300_800, 0, "+10000-01-01T00:00:00Z"),
        ] {
            let t = Timestamp { seconds, nanos };
            assert_eq!(
                text(&|w| t.write_canonical(w)),
                format!(r#"{{"v":"{want}"}}"#)
            );
            if (0..1_000_000_000).contains(&nanos) && want.starts_with(|c: char| c.is_ascii_digit())
            {
                // The run-time path agrees on the proto JSON text (with its trailing zeros).
                let proto_json = t.to_string();
                assert_eq!(
                    runtime(&proto_json, Timestamp::value_spec(), true),
                    text(&|w| t.write_canonical(w)),
                    "{proto_json}"
                );
            }
        }
        for (seconds, nanos, want) in [
            (1, 500_000_000, "1.5s"),
            (0, 0, "0s"),
            (0, -1, "-0.000000001s"),
            (-3, 0, "-3s"),
            (-1, 500_000_000, "-0.5s"),
            (2, -500_000_000, "1.5s"),
            (0, 1_500_000_000, "1.5s"),
            (i64::MIN, -999_999_999, "-9223372036854775808.999999999s"),
            (315_576_000_000, 0, "315576000000s"),
        ] {
            let d = Duration { seconds, nanos };
            assert_eq!(
                text(&|w| d.write_canonical(w)),
                format!(r#"{{"v":"{want}"}}"#),
                "{seconds} {nanos}"
            );
        }
    }
}
