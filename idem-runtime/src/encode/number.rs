//! Exact decimal numbers (`docs/fingerprint.md`, "Numbers").
//!
//! A number is read as digits and an exponent and written as a plain decimal: no exponent, no
//! trailing fractional zeros, no trailing `.`, no `+`, `-0` -> `0`. Nothing goes through `f64`.

use core::ops::{Div, Rem};

use super::error::CanonicalError;
use super::sink::Sink;

/// Numbers whose plain form would need more than this many zeros are rejected rather than
/// expanded (a `1e1000000000` in a request body must not allocate a gigabyte). Every `f64`,
/// `i128`/`u128` and `rust_decimal::Decimal` fits well inside.
pub(crate) const MAX_ZEROS: i64 = 1100;

/// Appends the canonical form of `mantissa * 10^-scale`.
#[inline]
pub(crate) fn write_decimal<O: Sink + ?Sized>(out: &mut O, mantissa: i128, scale: u32) {
    if mantissa < 0 {
        out.put_byte(b'-');
    }
    // Most amounts fit in 64 bits, where division is a multiplication (u128 division is a
    // library call).
    match u64::try_from(mantissa.unsigned_abs()) {
        Ok(small) => write_unsigned_decimal(out, small, scale),
        Err(_) => write_unsigned_decimal(out, mantissa.unsigned_abs(), scale),
    }
}

/// Appends `m * 10^-scale` for an unsigned `m` (`u64` or `u128`).
#[inline]
fn write_unsigned_decimal<O, M>(out: &mut O, mut m: M, mut scale: u32)
where
    O: Sink + ?Sized,
    M: itoa::Integer + Copy + PartialEq + From<u8> + Rem<Output = M> + Div<Output = M>,
{
    let (zero, ten) = (M::from(0), M::from(10));
    while scale > 0 && m % ten == zero {
        m = m / ten;
        scale -= 1;
    }
    let mut buf = itoa::Buffer::new();
    // `0` (and `-0`, whose sign was written above only if the mantissa was negative, which a
    // zero mantissa is not) has no fraction left: `scale` is 0 once the zeros are stripped.
    split_at_point(out, buf.format(m).as_bytes(), scale as usize);
}

/// Appends `digits` (no trailing zero unless `frac` is 0) with a decimal point `frac` digits
/// from the right: [`place_point`] for one slice of digits, which the derive's decimals take
/// often enough to measure (writing them through `place_point` costs ~50 more instructions per
/// fingerprint, `scripts/bench-instructions`).
#[inline(always)]
fn split_at_point<O: Sink + ?Sized>(out: &mut O, digits: &[u8], frac: usize) {
    if frac == 0 {
        out.put(digits);
    } else if digits.len() > frac {
        let (int, fraction) = digits.split_at(digits.len() - frac);
        out.put(int);
        out.put_byte(b'.');
        out.put(fraction);
    } else {
        out.put(b"0.");
        out.put_repeat(b'0', frac - digits.len());
        out.put(digits);
    }
}

/// Significant digits stored as the concatenation of two slices (the integer and fractional
/// digits of a number text), so that nothing is copied before writing.
#[derive(Clone, Copy)]
struct Digits<'a>(&'a [u8], &'a [u8]);

impl Digits<'_> {
    fn len(self) -> usize {
        self.0.len() + self.1.len()
    }

    /// Appends digits `from..to`.
    fn write<O: Sink + ?Sized>(self, out: &mut O, from: usize, to: usize) {
        let split = self.0.len();
        if from < split {
            out.put(&self.0[from..to.min(split)]);
        }
        if to > split {
            out.put(&self.1[from.max(split) - split..to - split]);
        }
    }
}

/// Appends `digits * 10^exp` in plain form. `digits` has no leading zeros and is not empty.
fn place_point<O: Sink + ?Sized>(out: &mut O, digits: Digits<'_>, exp: i64) {
    let len = digits.len();
    if exp >= 0 {
        digits.write(out, 0, len);
        out.put_repeat(b'0', exp as usize);
        return;
    }
    let frac = (-exp) as usize;
    if len > frac {
        let int = len - frac;
        digits.write(out, 0, int);
        out.put_byte(b'.');
        digits.write(out, int, len);
    } else {
        out.put(b"0.");
        out.put_repeat(b'0', frac - len);
        digits.write(out, 0, len);
    }
}

/// Appends the canonical form of a JSON number text or decimal string: an optional sign, digits
/// with an optional `.` (at least one digit on either side), an optional exponent. Never
/// allocates beyond `out`.
pub(crate) fn write_number_text<O: Sink + ?Sized>(
    out: &mut O,
    text: &str,
) -> Result<(), CanonicalError> {
    let invalid = || CanonicalError::InvalidNumber {
        path: String::new(),
        text: truncate(text),
    };
    let bytes = text.as_bytes();
    let (negative, rest) = match bytes.first() {
        Some(b'-') => (true, &bytes[1..]),
        Some(b'+') => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    let mantissa_end = rest
        .iter()
        .position(|&b| b == b'e' || b == b'E')
        .unwrap_or(rest.len());
    let (mantissa, exponent) = rest.split_at(mantissa_end);
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(dot) => (&mantissa[..dot], &mantissa[dot + 1..]),
        None => (mantissa, &mantissa[..0]),
    };
    if int.is_empty() && frac.is_empty() || !int.iter().chain(frac).all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let mut exp: i64 = if exponent.is_empty() {
        0
    } else {
        let e = &exponent[1..];
        let (neg, digits) = match e.first() {
            Some(b'-') => (true, &e[1..]),
            Some(b'+') => (false, &e[1..]),
            _ => (false, e),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err(invalid());
        }
        // Saturate: anything this large is out of range below anyway.
        let magnitude = digits.iter().fold(0i64, |acc, &d| {
            acc.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
        if neg { -magnitude } else { magnitude }
    };
    exp = exp.saturating_sub(frac.len() as i64);

    // Significant digits: int ++ frac without leading zeros; trailing zeros move into `exp`.
    let all = Digits(int, frac);
    let at = |i: usize| {
        if i < int.len() {
            int[i]
        } else {
            frac[i - int.len()]
        }
    };
    let total = all.len();
    let lead = (0..total).take_while(|&i| at(i) == b'0').count();
    if lead == total {
        out.put_byte(b'0');
        return Ok(());
    }
    let trail = (lead..total).rev().take_while(|&i| at(i) == b'0').count();
    exp = exp.saturating_add(trail as i64);
    let len = total - lead - trail;
    // `unsigned_abs`: the saturated `exp` may be `i64::MIN`, which `-exp` overflows.
    let zeros = if exp >= 0 {
        exp.unsigned_abs()
    } else {
        exp.unsigned_abs().saturating_sub(len as u64)
    };
    if zeros > MAX_ZEROS.unsigned_abs() {
        return Err(CanonicalError::NumberOutOfRange {
            path: String::new(),
            text: truncate(text),
        });
    }
    if negative {
        out.put_byte(b'-');
    }
    // Re-slice so that the significant digits start at 0 and end at `len`.
    let (a, b) = if lead < int.len() {
        (&int[lead..], frac)
    } else {
        (&frac[..0], &frac[lead - int.len()..])
    };
    let sig = Digits(a, b);
    let end = total - trail - lead;
    let (a, b) = if end <= sig.0.len() {
        (&sig.0[..end], &sig.1[..0])
    } else {
        (sig.0, &sig.1[..end - sig.0.len()])
    };
    place_point(out, Digits(a, b), exp);
    Ok(())
}

pub(crate) use super::error::truncate;

/// Appends the canonical form of a `serde_json::Number`: integers directly, floats from their
/// shortest round-trip text (`Display`), which is also the exact text under serde_json's
/// `arbitrary_precision` feature. Allocation-free unless that text exceeds 64 bytes.
pub(crate) fn write_json_number<O: Sink + ?Sized>(
    out: &mut O,
    n: &serde_json::Number,
) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64() {
        out.put(itoa::Buffer::new().format(u).as_bytes());
        return Ok(());
    }
    if let Some(i) = n.as_i64() {
        out.put(itoa::Buffer::new().format(i).as_bytes());
        return Ok(());
    }
    let mut text = StackText {
        buf: [0; 64],
        len: 0,
    };
    if core::fmt::Write::write_fmt(&mut text, format_args!("{n}")).is_ok() {
        write_number_text(out, text.as_str())
    } else {
        write_number_text(out, &n.to_string())
    }
}

/// A `fmt::Write` into a fixed stack buffer; fails when full.
struct StackText {
    buf: [u8; 64],
    len: usize,
}

impl StackText {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever copied in.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl core::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(core::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> Result<String, CanonicalError> {
        let mut out = Vec::new();
        write_number_text(&mut out, text).map(|()| String::from_utf8(out).unwrap())
    }

    #[test]
    fn normalizes_decimals() {
        for (input, want) in [
            ("100", "100"),
            ("100.0", "100"),
            ("100.00", "100"),
            ("1e2", "100"),
            ("1E+2", "100"),
            ("10000e-2", "100"),
            ("0.10", "0.1"),
            ("-0", "0"),
            ("-0.000", "0"),
            ("+5", "5"),
            ("007.50", "7.5"),
            ("1.5e-7", "0.00000015"),
            ("-12.34e1", "-123.4"),
            (
                "123456789012345678901234567890.123",
                "123456789012345678901234567890.123",
            ),
            ("0e99999999999999999999", "0"),
            ("0.0012300", "0.00123"),
            ("12300", "12300"),
            ("-00.5e1", "-5"),
            ("100e-5", "0.001"),
            ("1.0e0", "1"),
            ("00012.3400e2", "1234"),
            ("0.000", "0"),
            ("5.", "5"),
            (".5", "0.5"),
        ] {
            assert_eq!(canon(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_number() {
        for input in [
            "", "-", ".", "1.2.3", "abc", "1e", "1e+", " 1", "1 ", "0x10", "NaN", "Infinity",
        ] {
            assert!(
                matches!(canon(input), Err(CanonicalError::InvalidNumber { .. })),
                "{input:?}"
            );
        }
    }

    #[test]
    fn rejects_numbers_too_large_to_expand() {
        assert!(matches!(
            canon("1e1000000"),
            Err(CanonicalError::NumberOutOfRange { .. })
        ));
        assert!(matches!(
            canon("1e-1000000"),
            Err(CanonicalError::NumberOutOfRange { .. })
        ));
        assert!(matches!(
            canon("1e99999999999999999999999"),
            Err(CanonicalError::NumberOutOfRange { .. })
        ));
        assert_eq!(canon("1e308").unwrap().len(), 309);
    }

    #[test]
    fn writes_decimals_from_parts() {
        let d = |m, s| {
            let mut out = Vec::new();
            write_decimal(&mut out, m, s);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(d(10000, 2), "100");
        assert_eq!(d(-10, 2), "-0.1");
        assert_eq!(d(0, 5), "0");
        assert_eq!(d(5, 3), "0.005");
        assert_eq!(d(i128::MIN, 0), i128::MIN.to_string());
    }
}
