//! Minimal JSON string escaping (`docs/fingerprint.md`, "Strings").

/// Appends `s` as a quoted JSON string: `"` and `\` escaped, `\b \f \n \r \t` by their short
/// forms, other control characters below U+0020 as `\u00xx` (lowercase hex), nothing else.
///
/// Most strings need no escape at all; they are scanned eight bytes at a time and copied whole.
pub(crate) fn write_escaped_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    while let Some(i) = find_escape(bytes, start) {
        out.extend_from_slice(&bytes[start..i]);
        write_escape(out, bytes[i]);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether a byte must be escaped inside a JSON string.
#[inline(always)]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// The index of the first byte at or after `from` that must be escaped.
#[inline]
fn find_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let rest = &bytes[from..];
    let mut chunks = rest.chunks_exact(8);
    let mut offset = from;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        // A byte below 0x20, or equal to `"` or `\`, sets its high bit in `hit` (the classic
        // "has less than" / "has zero byte" tests); false positives are ruled out below.
        let below = x.wrapping_sub(ONES * 0x20) & !x;
        let quote =
            (x ^ (ONES * u64::from(b'"'))).wrapping_sub(ONES) & !(x ^ (ONES * u64::from(b'"')));
        let backslash =
            (x ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES) & !(x ^ (ONES * u64::from(b'\\')));
        if (below | quote | backslash) & HIGH != 0 {
            if let Some(i) = chunk.iter().position(|&b| needs_escape(b)) {
                return Some(offset + i);
            }
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| needs_escape(b))
        .map(|i| offset + i)
}

#[cold]
fn write_escape(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short: &[u8] = match b {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        0x08 => b"\\b",
        0x0c => b"\\f",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        _ => {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
            return;
        }
    };
    out.extend_from_slice(short);
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

    #[test]
    fn finds_escapes_at_every_position_of_a_word() {
        for len in 0..40 {
            for at in 0..len {
                for special in [b'"', b'\\', b'\n', 0x00, 0x1f] {
                    let mut text = vec![b'a'; len];
                    // Bytes around the specials that the word tests must not mistake for them.
                    for (i, byte) in text.iter_mut().enumerate() {
                        *byte = [b'a', 0x20, b'!', b'#', b'[', b']', 0x7f, b'~'][i % 8];
                    }
                    text[at] = special;
                    let s = String::from_utf8(text).unwrap();
                    let want = serde_json::to_string(&s)
                        .unwrap()
                        .replace("\\u001F", "\\u001f");
                    assert_eq!(esc(&s), want, "len {len}, special {special:#x} at {at}");
                }
            }
        }
        let multibyte = "ü€😀".repeat(5);
        assert_eq!(esc(&multibyte), format!("\"{multibyte}\""));
    }
}
