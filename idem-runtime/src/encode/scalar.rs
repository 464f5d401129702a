//! Strings with a canonical form of their own: base64 bytes and UUIDs.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// Standard alphabet; padding optional; non-zero trailing bits rejected (so that exactly one
/// string per byte sequence is accepted, up to padding).
const LENIENT_PADDING: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Decodes a standard base64 string, fully padded or not padded at all.
pub(crate) fn decode_base64(text: &str) -> Result<Vec<u8>, &'static str> {
    if text.ends_with('=') && !text.len().is_multiple_of(4) {
        return Err(
            "incomplete `=` padding: pad to a multiple of 4 characters, or omit the padding",
        );
    }
    LENIENT_PADDING.decode(text).map_err(|e| match e {
        base64::DecodeError::InvalidLastSymbol(..) => {
            "the last base64 character has bits set beyond the data: re-encode the bytes"
        }
        base64::DecodeError::InvalidPadding => {
            "misplaced `=` padding: send standard base64 (RFC 4648 section 4)"
        }
        _ => {
            "not standard base64 (RFC 4648 section 4: `A-Z a-z 0-9 + /`, `=` padding, no whitespace); send the bytes as standard base64 or as an array of integers 0..=255"
        }
    })
}

/// Parses a UUID in any case as hyphenated (`8-4-4-4-12`), simple (32 hex digits), braced
/// (`{...}`) or URN (`urn:uuid:...`) form, as the `uuid` crate does; returns its 16 bytes.
pub(crate) fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let s = text.as_bytes();
    let s = if let Some(rest) = s.strip_prefix(b"urn:uuid:") {
        rest
    } else if let Some(inner) = s.strip_prefix(b"{").and_then(|r| r.strip_suffix(b"}")) {
        inner
    } else {
        s
    };
    let hex: [u8; 32] = match s.len() {
        32 => s.try_into().ok()?,
        36 => {
            if [8, 13, 18, 23].iter().any(|&i| s[i] != b'-') {
                return None;
            }
            let mut hex = [0u8; 32];
            let mut n = 0;
            for &b in s.iter().filter(|&&b| b != b'-') {
                *hex.get_mut(n)? = b;
                n += 1;
            }
            if n != 32 {
                return None;
            }
            hex
        }
        _ => return None,
    };
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// Appends `"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"` (quoted, lowercase).
pub(crate) fn write_uuid<O: super::sink::Sink + ?Sized>(out: &mut O, bytes: &[u8; 16]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 38];
    buf[0] = b'"';
    buf[37] = b'"';
    let mut pos = 1;
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            buf[pos] = b'-';
            pos += 1;
        }
        buf[pos] = HEX[usize::from(b >> 4)];
        buf[pos + 1] = HEX[usize::from(b & 0xf)];
        pos += 2;
    }
    out.put(&buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_accepts_standard_padded_or_not() {
        assert_eq!(decode_base64("aGkhPw==").unwrap(), b"hi!?");
        assert_eq!(decode_base64("aGkhPw").unwrap(), b"hi!?");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert_eq!(decode_base64("+/8=").unwrap(), [0xfb, 0xff]);
        for bad in [
            "-_8=",
            "aGk hPw==",
            "aGkhPw=",
            "aGkhPx==",
            "a",
            "aGkhPw===",
            "=aGk",
        ] {
            assert!(
                decode_base64(bad).is_err(),
                "{bad}: {:?}",
                decode_base64(bad)
            );
        }
    }

    #[test]
    fn uuids_in_every_form() {
        let want = "\"67e55044-10b1-426f-9247-bb680e5fe0c8\"";
        for form in [
            "67e55044-10b1-426f-9247-bb680e5fe0c8",
            "67E55044-10B1-426F-9247-BB680E5FE0C8",
            "67e5504410b1426f9247bb680e5fe0c8",
            "{67e55044-10b1-426f-9247-bb680e5fe0c8}",
            "urn:uuid:67e55044-10b1-426f-9247-bb680e5fe0c8",
        ] {
            let mut out = Vec::new();
            write_uuid(&mut out, &parse_uuid(form).unwrap());
            assert_eq!(String::from_utf8(out).unwrap(), want, "{form}");
        }
        for bad in [
            "",
            "67e55044-10b1-426f-9247-bb680e5fe0c",
            "67e55044x10b1-426f-9247-bb680e5fe0c8",
            "67e5504410b1-426f-9247-bb680e5fe0c8-",
            "g7e55044-10b1-426f-9247-bb680e5fe0c8",
            "{67e55044-10b1-426f-9247-bb680e5fe0c8",
        ] {
            assert!(parse_uuid(bad).is_none(), "{bad}");
        }
    }
}
