//! Minimal JSON string escaping (`docs/fingerprint.md`, "Strings").

use super::sink::Sink;

/// Appends `s` as a quoted JSON string: `"` and `\` escaped, `\b \f \n \r \t` by their short
/// forms, other control characters below U+0020 as `\u00xx` (lowercase hex), nothing else.
///
/// Most strings need no escape at all: one branch-free test over (overlapping) 16-byte blocks
/// (SSE2 on x86-64, eight-byte words elsewhere) tells, and such a string is copied whole.
#[inline]
pub(crate) fn write_escaped_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    if scan(bytes, |_, _| {}) == 0 {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
    } else {
        write_with_escapes(out, bytes);
    }
}

/// Copies `src` into `dst` (of the same length) a block at a time and returns zero exactly
/// when no byte of `src` must be escaped. When it returns non-zero, `dst` holds the unescaped
/// bytes, to be overwritten by [`write_with_escapes`].
#[inline(always)]
pub(crate) fn copy_unescaped(src: &[u8], dst: &mut [u8]) -> u64 {
    scan(src, |at, bytes| {
        dst[at..at + bytes.len()].copy_from_slice(bytes)
    })
}

/// Copies `src` into `dst` (of the same length): short slices in words, long ones by
/// `copy_from_slice`.
#[inline(always)]
pub(crate) fn copy(src: &[u8], dst: &mut [u8]) {
    if src.len() <= 32 {
        // The escape test's result is unused, and compiled away.
        copy_unescaped(src, dst);
    } else {
        dst.copy_from_slice(src);
    }
}

/// The slow path: copies the runs between escapes and escapes what needs it (quotes included).
#[cold]
#[inline(never)]
pub(crate) fn write_with_escapes<O: Sink + ?Sized>(out: &mut O, bytes: &[u8]) {
    out.put_byte(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if needs_escape(b) {
            out.put(&bytes[start..i]);
            write_escape(out, b);
            start = i + 1;
        }
    }
    out.put(&bytes[start..]);
    out.put_byte(b'"');
}

/// Whether a byte must be escaped inside a JSON string.
#[inline(always)]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Zero exactly when no byte of the word `x` must be escaped. These are the classic "has a byte
/// less than n" and "has a zero byte" word tests: a borrow can only mark a byte above a true hit,
/// so the answer for the word as a whole is exact.
#[inline(always)]
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn escape_bits(x: u64) -> u64 {
    let below = x.wrapping_sub(ONES * 0x20);
    let q = x ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let b = x ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b;
    (below & !x | quote | backslash) & HIGH
}

/// Tests every byte of `bytes` inside a full word, handing each loaded piece to `put(offset,
/// piece)`: eight-byte words, the last one overlapping the one before it; strings shorter than
/// eight bytes as two overlapping halves, or (below four bytes) as the first, middle and last
/// byte padded with spaces, which need no escape. Zero exactly when no byte must be escaped.
#[inline(always)]
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn scan_words(bytes: &[u8], mut put: impl FnMut(usize, &[u8])) -> u64 {
    let n = bytes.len();
    if n >= 8 {
        let mut hits = 0;
        let mut at = 0;
        while at + 8 < n {
            let word: &[u8; 8] = first_chunk(&bytes[at..]);
            hits |= escape_bits(u64::from_le_bytes(*word));
            put(at, word);
            at += 8;
        }
        let word: &[u8; 8] = first_chunk(&bytes[n - 8..]);
        put(n - 8, word);
        hits | escape_bits(u64::from_le_bytes(*word))
    } else {
        short(bytes, put, escape_bits)
    }
}

/// [`scan_words`] for strings shorter than eight bytes: two overlapping halves, or (below four
/// bytes) the first, middle and last byte, padded with spaces (which need no escape) into one
/// word tested by `test`.
#[inline(always)]
fn short(bytes: &[u8], mut put: impl FnMut(usize, &[u8]), test: impl Fn(u64) -> u64) -> u64 {
    let n = bytes.len();
    if n >= 4 {
        let lo: &[u8; 4] = first_chunk(bytes);
        let hi: &[u8; 4] = first_chunk(&bytes[n - 4..]);
        put(0, lo);
        put(n - 4, hi);
        test(u64::from(u32::from_le_bytes(*lo)) | u64::from(u32::from_le_bytes(*hi)) << 32)
    } else if n > 0 {
        let (first, middle, last) = (bytes[0], bytes[n / 2], bytes[n - 1]);
        put(0, &[first]);
        put(n / 2, &[middle]);
        put(n - 1, &[last]);
        test(u64::from_le_bytes([
            first, middle, last, b' ', b' ', b' ', b' ', b' ',
        ]))
    } else {
        0
    }
}

/// The escape test on 16-byte blocks with SSE2, which every x86-64 CPU has (through
/// `safe_arch`'s safe wrappers: this crate forbids `unsafe`).
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use safe_arch::{
        cmp_eq_mask_i8_m128i, m128i, min_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };

    /// `0xff` in the lanes of `v` that hold a byte to escape (below `0x20`, `"` or `\\`).
    #[inline(always)]
    pub(super) fn escapes(v: m128i) -> m128i {
        let control = cmp_eq_mask_i8_m128i(min_u8_m128i(v, set_splat_i8_m128i(0x1f)), v);
        let quote = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'"' as i8));
        let backslash = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'\\' as i8));
        control | quote | backslash
    }

    /// Non-zero exactly when some lane of `hits` is set.
    #[inline(always)]
    pub(super) fn any(hits: m128i) -> u64 {
        move_mask_i8_m128i(hits) as u32 as u64
    }

    /// The block of 16 bytes.
    #[inline(always)]
    pub(super) fn block(bytes: &[u8; 16]) -> m128i {
        safe_arch::load_unaligned_m128i(bytes)
    }

    /// The block of two little-endian words.
    #[inline(always)]
    pub(super) fn words(lo: u64, hi: u64) -> m128i {
        m128i::from([lo, hi])
    }
}

/// Tests every byte of `bytes` inside a full block, handing each loaded piece to `put(offset,
/// piece)`: 16-byte blocks, the last one overlapping the one before it; 8 to 15 bytes as two
/// overlapping words in one block; shorter strings as in [`short`]. Zero exactly when no byte
/// must be escaped.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn scan(bytes: &[u8], mut put: impl FnMut(usize, &[u8])) -> u64 {
    let n = bytes.len();
    if n >= 16 {
        let mut hits = sse2::words(0, 0);
        let mut at = 0;
        while at + 16 < n {
            let block: &[u8; 16] = first_chunk(&bytes[at..]);
            hits |= sse2::escapes(sse2::block(block));
            put(at, block);
            at += 16;
        }
        let block: &[u8; 16] = first_chunk(&bytes[n - 16..]);
        put(n - 16, block);
        sse2::any(hits | sse2::escapes(sse2::block(block)))
    } else if n >= 8 {
        let lo: &[u8; 8] = first_chunk(bytes);
        let hi: &[u8; 8] = first_chunk(&bytes[n - 8..]);
        put(0, lo);
        put(n - 8, hi);
        let v = sse2::words(u64::from_le_bytes(*lo), u64::from_le_bytes(*hi));
        sse2::any(sse2::escapes(v))
    } else {
        short(bytes, put, |x| {
            sse2::any(sse2::escapes(sse2::words(x, ONES * u64::from(b' '))))
        })
    }
}

#[cfg(not(target_arch = "x86_64"))]
use scan_words as scan;

/// The first `N` bytes of `bytes`, which the callers above know to be long enough.
#[inline(always)]
fn first_chunk<const N: usize>(bytes: &[u8]) -> &[u8; N] {
    match bytes.first_chunk() {
        Some(chunk) => chunk,
        None => unreachable!("callers check the length"),
    }
}

fn write_escape<O: Sink + ?Sized>(out: &mut O, b: u8) {
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
            out.put(&[
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
    out.put(short);
}

#[cfg(test)]
mod tests {
    use super::{scan, scan_words, write_escaped_str};

    /// The escaped form by the run-time path, checked against the writer's (which copies and
    /// scans in one pass, and writes member names with their separator and colon).
    fn esc(s: &str) -> String {
        let mut out = Vec::new();
        write_escaped_str(&mut out, s);
        let text = String::from_utf8(out).unwrap();

        let mut typed = b"prefix".to_vec();
        let mut w = crate::encode::writer::CanonicalWriter::new(&mut typed);
        w.str(s);
        let mut first = false;
        w.member(&mut first, s);
        drop(w);
        assert_eq!(
            String::from_utf8(typed).unwrap(),
            format!("prefix{text},{text}:"),
            "{s:?}"
        );
        text
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

    /// Both scans (the SSE2 one on x86-64 and the word one used elsewhere) over every length up
    /// to several blocks, with one byte to escape at every position or none: the answer is
    /// exact, and the pieces handed out cover the input exactly.
    #[test]
    fn both_scans_test_every_byte_and_hand_out_every_byte() {
        let neighbours = [
            b'a', 0x20, b'!', b'#', b'[', b']', 0x7f, 0x80, 0xe9, 0xff, b'~',
        ];
        for len in 0..70 {
            let plain: Vec<u8> = (0..len).map(|i| neighbours[i % neighbours.len()]).collect();
            let mut cases = vec![(plain.clone(), false)];
            for at in 0..len {
                for special in [b'"', b'\\', b'\n', 0x00, 0x1f] {
                    let mut bytes = plain.clone();
                    bytes[at] = special;
                    cases.push((bytes, true));
                }
            }
            for (bytes, needs_escape) in cases {
                type Scan = fn(&[u8], &mut dyn FnMut(usize, &[u8])) -> u64;
                let scans: [(&str, Scan); 2] = [
                    ("scan", |b, put| scan(b, put)),
                    ("scan_words", |b, put| scan_words(b, put)),
                ];
                for (name, scan) in scans {
                    let mut copy = vec![b'?'; bytes.len()];
                    let hits = scan(&bytes, &mut |at, piece| {
                        copy[at..at + piece.len()].copy_from_slice(piece)
                    });
                    assert_eq!(hits != 0, needs_escape, "{name}: {bytes:?}");
                    assert_eq!(copy, bytes, "{name}: pieces of {bytes:?}");
                }
            }
        }
    }
}
