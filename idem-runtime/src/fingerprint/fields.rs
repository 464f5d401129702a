//! Field adapters for the opt-in attributes of `#[derive(Fingerprint)]`:
//! `#[fingerprint(float)]` ([`FloatField`]) and `#[fingerprint(base64)]` ([`Base64Field`]).
//!
//! Generated code calls them as `::idem::__private::FloatField::write_float(&self.x, w)`; they are
//! public only so that it can. Like [`super::Canonical`], they never allocate per field.

use std::borrow::Cow;

use super::CanonicalWriter;
use crate::json::ValueSpec;

/// A binary float field (`#[fingerprint(float)]`): written from its shortest round-trip text as an
/// exact decimal (`0.1_f64` -> `0.1`, `1e21` -> `1000000000000000000000`); NaN and infinities are
/// `null`, so an object member holding one is omitted, like `serde_json` (which serializes them
/// as `null`).
///
/// Implemented for `f32`, `f64`, and `Option`, `Vec`, slices, arrays, references and boxes of
/// them.
///
#[diagnostic::on_unimplemented(
    message = "`#[fingerprint(float)]` does not apply to `{Self}`",
    label = "not a binary float field",
    note = "`float` applies to `f32`, `f64` and `Option`, `Vec`, slices, arrays, `&` and `Box` of them; exact numbers (integers, `Decimal`) need no attribute"
)]
pub trait FloatField {
    /// Writes the canonical JSON text of the float(s).
    fn write_float(&self, w: &mut CanonicalWriter<'_>);
    /// `true` when the value is JSON `null` (`None`, NaN, an infinity): the member is omitted.
    fn is_null(&self) -> bool;
    /// The run-time spec that canonicalizes `serde_json::to_value(self)` to the same bytes.
    fn value_spec() -> ValueSpec;
}

impl FloatField for f64 {
    #[inline]
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        w.f64(*self);
    }
    #[inline]
    fn is_null(&self) -> bool {
        !self.is_finite()
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

impl FloatField for f32 {
    #[inline]
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        w.f32(*self);
    }
    #[inline]
    fn is_null(&self) -> bool {
        !self.is_finite()
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

impl<F: FloatField> FloatField for Option<F> {
    #[inline]
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        match self {
            Some(v) => v.write_float(w),
            None => w.null(),
        }
    }
    #[inline]
    fn is_null(&self) -> bool {
        self.as_ref().is_none_or(F::is_null)
    }
    fn value_spec() -> ValueSpec {
        F::value_spec()
    }
}

fn write_float_array<F: FloatField>(items: &[F], w: &mut CanonicalWriter<'_>) {
    w.raw(b"[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            w.raw(b",");
        }
        item.write_float(w);
    }
    w.raw(b"]");
}

impl<F: FloatField> FloatField for [F] {
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        write_float_array(self, w);
    }
    fn is_null(&self) -> bool {
        false
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Array(Box::new(F::value_spec()))
    }
}

impl<F: FloatField, const N: usize> FloatField for [F; N] {
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        write_float_array(self, w);
    }
    fn is_null(&self) -> bool {
        false
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Array(Box::new(F::value_spec()))
    }
}

impl<F: FloatField> FloatField for Vec<F> {
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        write_float_array(self, w);
    }
    fn is_null(&self) -> bool {
        false
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Array(Box::new(F::value_spec()))
    }
}

impl<F: FloatField + ?Sized> FloatField for &F {
    #[inline]
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        (**self).write_float(w);
    }
    #[inline]
    fn is_null(&self) -> bool {
        (**self).is_null()
    }
    fn value_spec() -> ValueSpec {
        F::value_spec()
    }
}

impl<F: FloatField + ?Sized> FloatField for Box<F> {
    #[inline]
    fn write_float(&self, w: &mut CanonicalWriter<'_>) {
        (**self).write_float(w);
    }
    #[inline]
    fn is_null(&self) -> bool {
        (**self).is_null()
    }
    fn value_spec() -> ValueSpec {
        F::value_spec()
    }
}

/// A byte-buffer field (`#[fingerprint(base64)]`): written as a standard, padded base64 string.
/// The run-time spec [`ValueSpec::Base64`] accepts both that string and serde's own form of
/// `Vec<u8>` (an array of integers), so `serde_json::to_value` of the field canonicalizes alike.
///
/// Implemented for `Vec<u8>`, `[u8]`, `[u8; N]`, `Box<[u8]>`, `Cow<[u8]>`, references to them and
/// `Option` of them.
///
#[diagnostic::on_unimplemented(
    message = "`#[fingerprint(base64)]` does not apply to `{Self}`",
    label = "not a byte buffer",
    note = "`base64` applies to `Vec<u8>`, `[u8]`, `[u8; N]`, `Box<[u8]>`, `Cow<[u8]>`, references to them and `Option` of them"
)]
pub trait Base64Field {
    /// Writes the bytes as a quoted base64 string (or `null` for `None`).
    fn write_base64(&self, w: &mut CanonicalWriter<'_>);
    /// `true` for `None`: the member is omitted.
    fn is_null(&self) -> bool;
    /// [`ValueSpec::Base64`].
    fn value_spec() -> ValueSpec;
}

macro_rules! base64_bytes {
    ($([$($g:tt)*] $t:ty;)*) => {$(
        impl<$($g)*> Base64Field for $t {
            #[inline]
            fn write_base64(&self, w: &mut CanonicalWriter<'_>) {
                w.base64(self.as_ref());
            }
            #[inline]
            fn is_null(&self) -> bool {
                false
            }
            fn value_spec() -> ValueSpec {
                ValueSpec::Base64
            }
        }
    )*};
}
base64_bytes! {
    [] [u8];
    [const N: usize] [u8; N];
    [] Vec<u8>;
    [] Box<[u8]>;
    [] Cow<'_, [u8]>;
}

impl<B: Base64Field + ?Sized> Base64Field for &B {
    #[inline]
    fn write_base64(&self, w: &mut CanonicalWriter<'_>) {
        (**self).write_base64(w);
    }
    #[inline]
    fn is_null(&self) -> bool {
        (**self).is_null()
    }
    fn value_spec() -> ValueSpec {
        B::value_spec()
    }
}

impl<B: Base64Field> Base64Field for Option<B> {
    #[inline]
    fn write_base64(&self, w: &mut CanonicalWriter<'_>) {
        match self {
            Some(v) => v.write_base64(w),
            None => w.null(),
        }
    }
    #[inline]
    fn is_null(&self) -> bool {
        self.as_ref().is_none_or(B::is_null)
    }
    fn value_spec() -> ValueSpec {
        B::value_spec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float<F: FloatField + ?Sized>(v: &F) -> String {
        let mut out = Vec::new();
        v.write_float(&mut CanonicalWriter::new(&mut out));
        String::from_utf8(out).unwrap()
    }

    fn b64<B: Base64Field + ?Sized>(v: &B) -> String {
        let mut out = Vec::new();
        v.write_base64(&mut CanonicalWriter::new(&mut out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn floats_are_exact_decimals_of_their_shortest_text() {
        assert_eq!(float(&0.1_f64), "0.1");
        assert_eq!(float(&0.1_f32), "0.1");
        assert_eq!(float(&100.0_f64), "100");
        assert_eq!(float(&-0.0_f64), "0");
        assert_eq!(float(&1e21_f64), "1000000000000000000000");
        assert_eq!(float(&1.5e-7_f64), "0.00000015");
        assert_eq!(float(&f64::NAN), "null");
        assert_eq!(float(&Some(2.5_f32)), "2.5");
        assert_eq!(float(&None::<f64>), "null");
        assert_eq!(float(&[1.0_f64, f64::INFINITY]), "[1,null]");
        assert_eq!(float(&vec![0.5_f32][..]), "[0.5]");
        assert_eq!(float(&Box::new(3.25_f64)), "3.25");
        assert_eq!(float(&&7.0_f64), "7");
        assert!(FloatField::is_null(&f32::NEG_INFINITY));
        assert!(FloatField::is_null(&Some(f64::NAN)));
        assert!(!FloatField::is_null(&Vec::<f64>::new()));
        assert_eq!(
            <Vec<Option<f64>> as FloatField>::value_spec(),
            ValueSpec::Array(Box::new(ValueSpec::Any))
        );
    }

    #[test]
    fn bytes_are_padded_standard_base64() {
        assert_eq!(b64(&Vec::<u8>::new()), r#""""#);
        assert_eq!(b64(&[0xfb_u8, 0xff]), r#""+/8=""#);
        assert_eq!(b64(&b"abc"[..]), r#""YWJj""#);
        assert_eq!(b64(&&b"abcd"[..]), r#""YWJjZA==""#);
        assert_eq!(b64(&Box::<[u8]>::from(&b"a"[..])), r#""YQ==""#);
        assert_eq!(b64(&Cow::Borrowed(&b"ab"[..])), r#""YWI=""#);
        assert_eq!(b64(&Some(vec![1_u8])), r#""AQ==""#);
        assert_eq!(b64(&None::<Vec<u8>>), "null");
        assert_eq!(
            <Option<Vec<u8>> as Base64Field>::value_spec(),
            ValueSpec::Base64
        );
    }
}
