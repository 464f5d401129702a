//! JSON text rendered at expansion time: member names and variant tags become byte-string
//! literals in the generated code. The escaping is the runtime's (`docs/fingerprint.md`,
//! "Strings"): `"` and `\`, `\b \f \n \r \t`, other controls as `\u00xx`, nothing else.

/// `"name"`.
pub(crate) fn string(name: &str) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(name.len() + 2);
    out.push(b'"');
    for &b in name.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x00..=0x1f => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
            _ => out.push(b),
        }
    }
    out.push(b'"');
    out
}

/// `"name":`, an object member's prefix.
pub(crate) fn member_prefix(name: &str) -> Vec<u8> {
    let mut out = string(name);
    out.push(b':');
    out
}

/// `{"name":`, the opening of an externally tagged variant.
pub(crate) fn open_tagged(name: &str) -> Vec<u8> {
    let mut out = vec![b'{'];
    out.extend_from_slice(&member_prefix(name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_the_runtime() {
        assert_eq!(string("plain"), br#""plain""#);
        assert_eq!(string("a\"b\\c"), br#""a\"b\\c""#);
        assert_eq!(string("\u{8}\u{c}\n\r\t"), br#""\b\f\n\r\t""#);
        assert_eq!(string("\u{0}\u{1f}"), br#""\u0000\u001f""#);
        assert_eq!(string("é/\u{7f}"), "\"é/\u{7f}\"".as_bytes());
        assert_eq!(member_prefix("a"), br#""a":"#);
        assert_eq!(open_tagged("V"), br#"{"V":"#);
    }
}
