//! The client key: the `Idempotency-Key` header value (an RFC 8941 sf-string, the draft's form, or
//! a bare key, Stripe's form), or a key taken from the request itself.

use super::rules::{InvalidKey, check_length};

/// Parses an `Idempotency-Key` header value into the client key.
///
/// Two forms are accepted and are **equivalent** (`"abc"` and `abc` name the same key):
///
/// * an sf-string (RFC 8941 section 3.3.3, the form the IETF draft requires):
///   `"8e03978e-40d5-43e8-bc93-6894a57f9324"`; inside the quotes printable ASCII (`0x20`-`0x7E`)
///   only, with `\"` and `\\` as the only escapes. Parameters (`"k";a=1`) are not accepted;
/// * a bare key (what Stripe's clients send): visible ASCII (`0x21`-`0x7E`) other than `"` and
///   `\`, no spaces.
///
/// Leading and trailing spaces and tabs are ignored. The key (after unquoting) must have 1 to 255
/// characters.
///
/// # Errors
/// [`InvalidKey`], which says what to send instead.
///
/// ```
/// use idem_runtime::key::{InvalidKey, parse_header_key};
/// assert_eq!(parse_header_key(br#""8e03978e-40d5""#).unwrap(), "8e03978e-40d5");
/// assert_eq!(parse_header_key(b"8e03978e-40d5").unwrap(), "8e03978e-40d5");
/// assert_eq!(parse_header_key(br#""a \"quoted\" key""#).unwrap(), r#"a "quoted" key"#);
/// assert_eq!(parse_header_key(b"\"\"").unwrap_err(), InvalidKey::Empty);
/// assert!(matches!(parse_header_key(br#""abc"#), Err(InvalidKey::MalformedString { .. })));
/// assert!(matches!(parse_header_key(b"a b"), Err(InvalidKey::NotAToken { .. })));
/// assert!(matches!(parse_header_key(b"a\tb"), Err(InvalidKey::ControlCharacter { code: 9, .. })));
/// assert!(matches!(parse_header_key("x".repeat(256).as_bytes()), Err(InvalidKey::TooLong { chars: 256 })));
/// ```
pub fn parse_header_key(value: &[u8]) -> Result<String, InvalidKey> {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    let v = &value[start..end];
    let key = match v.first() {
        None => return Err(InvalidKey::Empty),
        Some(b'"') => parse_sf_string(v, start)?,
        Some(_) => parse_bare(v, start)?,
    };
    check_length(&key)?;
    Ok(key)
}

fn parse_sf_string(v: &[u8], offset: usize) -> Result<String, InvalidKey> {
    let malformed = |reason, i: usize| InvalidKey::MalformedString {
        reason,
        index: offset + i,
    };
    let mut out = String::with_capacity(v.len());
    let mut i = 1;
    while i < v.len() {
        match v[i] {
            b'\\' => match v.get(i + 1) {
                Some(&c @ (b'"' | b'\\')) => {
                    out.push(char::from(c));
                    i += 2;
                    continue;
                }
                Some(_) => return Err(malformed("an escape other than `\\\"` or `\\\\`", i)),
                None => return Err(malformed("a backslash at the end", i)),
            },
            b'"' if i + 1 == v.len() => return Ok(out),
            b'"' => return Err(malformed("characters after the closing quote", i + 1)),
            c @ (0x00..=0x1f | 0x7f) => {
                return Err(InvalidKey::ControlCharacter {
                    code: u32::from(c),
                    index: offset + i,
                });
            }
            0x80..=0xff => return Err(malformed("a byte outside ASCII", i)),
            c => out.push(char::from(c)),
        }
        i += 1;
    }
    Err(malformed("no closing quote", v.len()))
}

fn parse_bare(v: &[u8], offset: usize) -> Result<String, InvalidKey> {
    for (i, &c) in v.iter().enumerate() {
        match c {
            0x00..=0x1f | 0x7f => {
                return Err(InvalidKey::ControlCharacter {
                    code: u32::from(c),
                    index: offset + i,
                });
            }
            b' ' | b'"' | b'\\' => {
                return Err(InvalidKey::NotAToken {
                    found: char::from(c),
                    index: offset + i,
                });
            }
            0x80..=0xff => {
                return Err(InvalidKey::NotAToken {
                    found: char::REPLACEMENT_CHARACTER,
                    index: offset + i,
                });
            }
            _ => {}
        }
    }
    // Only visible ASCII is left: valid UTF-8, copied as it is.
    Ok(core::str::from_utf8(v).unwrap_or_default().to_owned())
}
