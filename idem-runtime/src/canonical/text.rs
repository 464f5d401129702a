//! Minimal JSON string escaping (`docs/fingerprint.md`, "Strings").

/// Appends `s` as a quoted JSON string: `"` and `\` escaped, `\b \f \n \r \t` by their short
/// forms, other control characters below U+0020 as `\u00xx` (lowercase hex), nothing else.
pub(crate) fn write_escaped_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        if short.is_empty() {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]);
        } else {
            out.extend_from_slice(short);
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::write_escaped_str;

    fn esc(s: &str) -> String {
        let mut out = Vec::new();
        write_escaped_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_only_what_json_requires() {
        assert_eq!(esc("plain"), r#""plain""#);
        assert_eq!(esc("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(esc("\u{8}\u{c}\n\r\t"), r#""\b\f\n\r\t""#);
        assert_eq!(esc("\u{0}\u{1f}"), r#""\u0000\u001f""#);
        assert_eq!(esc("é/\u{7f}\u{2028}😀"), "\"é/\u{7f}\u{2028}😀\"");
    }
}
