//! Exact decimal numbers (`docs/fingerprint.md`, "Numbers").
//!
//! A number is read as digits and an exponent and written as a plain decimal: no exponent, no
//! trailing fractional zeros, no trailing `.`, no `+`, `-0` -> `0`. Nothing goes through `f64`.

use super::CanonicalError;

/// Numbers whose plain form would need more than this many zeros are rejected rather than
/// expanded (a `1e1000000000` in a request body must not allocate a gigabyte). Every `f64`,
/// `i128`/`u128` and `rust_decimal::Decimal` fits well inside.
pub(crate) const MAX_ZEROS: i64 = 1100;

/// Appends the canonical form of `mantissa * 10^-scale`.
pub(crate) fn write_decimal(out: &mut Vec<u8>, mantissa: i128, scale: u32) {
    let (mut m, mut scale) = (mantissa.unsigned_abs(), scale);
    if m == 0 {
        out.push(b'0');
        return;
    }
    while scale > 0 && m % 10 == 0 {
        m /= 10;
        scale -= 1;
    }
    if mantissa < 0 {
        out.push(b'-');
    }
    let mut buf = itoa::Buffer::new();
    place_point(out, buf.format(m).as_bytes(), -i64::from(scale));
}

/// Appends `digits * 10^exp` in plain form. `digits` has no leading zeros and is not empty.
fn place_point(out: &mut Vec<u8>, digits: &[u8], exp: i64) {
    if exp >= 0 {
        out.extend_from_slice(digits);
        out.resize(out.len() + exp as usize, b'0');
        return;
    }
    let frac = (-exp) as usize;
    if digits.len() > frac {
        let int = digits.len() - frac;
        out.extend_from_slice(&digits[..int]);
        out.push(b'.');
        out.extend_from_slice(&digits[int..]);
    } else {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + (frac - digits.len()), b'0');
        out.extend_from_slice(digits);
    }
}

/// Appends the canonical form of a JSON number text or decimal string: an optional sign, digits
/// with an optional `.` (at least one digit on either side), an optional exponent.
pub(crate) fn write_number_text(out: &mut Vec<u8>, text: &str) -> Result<(), CanonicalError> {
    let invalid = || CanonicalError::InvalidNumber {
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
    let mut digits: Vec<u8> = Vec::new();
    let all = int.iter().chain(frac).copied();
    let mut leading = true;
    for d in all {
        if leading && d == b'0' {
            continue;
        }
        leading = false;
        digits.push(d);
    }
    while digits.last() == Some(&b'0') {
        digits.pop();
        exp = exp.saturating_add(1);
    }
    if digits.is_empty() {
        out.push(b'0');
        return Ok(());
    }
    let zeros = if exp >= 0 {
        exp
    } else {
        (-exp).saturating_sub(digits.len() as i64)
    };
    if zeros > MAX_ZEROS {
        return Err(CanonicalError::NumberOutOfRange {
            text: truncate(text),
        });
    }
    if negative {
        out.push(b'-');
    }
    place_point(out, &digits, exp);
    Ok(())
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
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
