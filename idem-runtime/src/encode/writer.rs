//! [`CanonicalWriter`]: appends canonical JSON tokens to a byte buffer.

use super::error::CanonicalError;
use super::number;
use super::sink::Sink;
use super::text;

/// Appends canonical JSON text (see `docs/fingerprint.md`) to a byte buffer.
///
/// Generated code and hand-written [`Canonical`](crate::Canonical) impls (`#[fingerprint(with = path)]`) use it; it
/// never fails and never allocates beyond the buffer itself (sets render their elements into
/// scratch buffers to sort them).
///
/// ```
/// use idem_runtime::CanonicalWriter;
/// let mut out = Vec::new();
/// let mut w = CanonicalWriter::new(&mut out);
/// w.begin_object();
/// let mut first = true;
/// w.member(&mut first, "amount");
/// w.number_text("100.00").unwrap();
/// w.member(&mut first, "currency");
/// w.str("EUR");
/// w.end_object();
/// assert_eq!(w.as_bytes(), br#"{"amount":100,"currency":"EUR"}"#);
/// drop(w); // hands the text back to `out`
/// assert_eq!(out, br#"{"amount":100,"currency":"EUR"}"#);
/// ```
pub struct CanonicalWriter<'a> {
    /// `buf[..pos]` is the text; `buf[pos..]` is room already initialized, written over without
    /// growing the vector byte by byte.
    buf: &'a mut Vec<u8>,
    pos: usize,
    /// The vector's length when the writer was created: on drop, the vector is cut back to the
    /// text (to `start` if a panic is unwinding). `None` for the scratch buffer of
    /// [`RequestHash::of_canonical`](crate::RequestHash::of_canonical), whose room is kept for
    /// the next request.
    start: Option<usize>,
}

impl Drop for CanonicalWriter<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(start) = self.start {
            let end = if std::thread::panicking() {
                start
            } else {
                self.pos
            };
            self.buf.truncate(end);
        }
    }
}

impl<'a> CanonicalWriter<'a> {
    /// A writer appending to `out`. `out` holds the text written once the writer is dropped, or
    /// what it held before if a panic unwinds through the writer (a value's impl panicked in the
    /// middle of the text): never a partial text.
    #[inline]
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        CanonicalWriter {
            pos: out.len(),
            start: Some(out.len()),
            buf: out,
        }
    }

    /// A writer over a reused scratch buffer: writes from its start, and leaves its old bytes
    /// beyond the text in place as room for the next use.
    #[inline]
    pub(crate) fn scratch(buf: &'a mut Vec<u8>) -> Self {
        CanonicalWriter {
            buf,
            pos: 0,
            start: None,
        }
    }

    /// The `n` bytes of room at `pos`, growing the vector when it has less.
    #[inline(always)]
    fn room(&mut self, n: usize) -> &mut [u8] {
        let pos = self.pos;
        if self.buf.len() < pos + n {
            self.out_of_line(pos, |w| w.grow(n));
        }
        &mut self.buf[pos..pos + n]
    }

    #[inline(always)]
    fn grow(&mut self, n: usize) {
        // Initialize the vector's whole allocation at once (up to a page beyond the text), so
        // that growing is rare; beyond the allocation, `resize` grows it geometrically.
        let needed = self.pos + n;
        let room = self.buf.capacity().min(self.pos + 4096).max(needed);
        self.buf.resize(room, 0);
    }

    /// Runs a slow path (`write`, from position `from`) in a function of its own that is never
    /// inlined, so that the fast paths around it stay small. The buffer stays where it is: if
    /// `write` panics, the writer still holds the text written before.
    #[inline(always)]
    pub(crate) fn out_of_line(
        &mut self,
        from: usize,
        write: impl FnOnce(&mut CanonicalWriter<'_>),
    ) {
        self.pos = from;
        cold_write(self, write);
    }

    /// Appends bytes that are already canonical JSON (no check is made).
    #[inline(always)]
    pub fn raw(&mut self, canonical: &[u8]) {
        let pos = self.pos;
        // Short texts of a length unknown at compile time (digits, mostly) are copied in words
        // rather than by a call to `memcpy`; known lengths fold to plain stores either way.
        match self.buf[pos..].get_mut(..canonical.len()) {
            Some(dst) => text::copy(canonical, dst),
            None => text::copy(canonical, self.room(canonical.len())),
        }
        self.pos = pos + canonical.len();
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.raw(&[b]);
    }

    /// `null`.
    #[inline]
    pub fn null(&mut self) {
        self.raw(b"null");
    }

    /// `true` / `false`.
    #[inline]
    pub fn bool(&mut self, v: bool) {
        // One call per branch, so that each copies a length known at compile time.
        if v {
            self.raw(b"true");
        } else {
            self.raw(b"false");
        }
    }

    /// A JSON string, quoted and minimally escaped.
    #[inline(always)]
    pub fn str(&mut self, s: &str) {
        self.quoted(b"", s, b"");
    }

    /// `before`, then `s` as a JSON string, then `after`, with one check for room.
    #[inline(always)]
    pub(crate) fn quoted(&mut self, before: &[u8], s: &str, after: &[u8]) {
        let bytes = s.as_bytes();
        let (b, n, a) = (before.len(), bytes.len(), after.len());
        // A string's length is at most `isize::MAX`: saying so lets the compiler drop the
        // overflow checks of the splits below.
        let Some(len) = n.checked_add(b + a + 2) else {
            unreachable!("a string is shorter than the address space")
        };
        let pos = self.pos;
        let dst = match self.buf[pos..].get_mut(..len) {
            Some(dst) => dst,
            None => self.room(len),
        };
        let (head, rest) = dst.split_at_mut(b + 1);
        let (body, tail) = rest.split_at_mut(n);
        head[..b].copy_from_slice(before);
        head[b] = b'"';
        if text::copy_unescaped(bytes, body) == 0 {
            tail[0] = b'"';
            tail[1..].copy_from_slice(after);
            self.pos = pos + len;
        } else {
            self.out_of_line(pos + b, |w| text::write_with_escapes(w, bytes));
            self.raw(after);
        }
    }

    /// An integer in decimal.
    #[inline]
    pub fn integer<I: itoa::Integer>(&mut self, v: I) {
        let mut buf = itoa::Buffer::new();
        self.raw(buf.format(v).as_bytes());
    }

    /// A decimal `mantissa * 10^-scale`, canonical (no trailing fractional zeros, `-0` -> `0`).
    #[inline]
    pub fn decimal(&mut self, mantissa: i128, scale: u32) {
        number::write_decimal(self, mantissa, scale);
    }

    /// A number given as JSON number text or a decimal string (`"100.00"`, `"1e2"`, `"-0.10"`),
    /// written in canonical form.
    pub fn number_text(&mut self, text: &str) -> Result<(), CanonicalError> {
        number::write_number_text(self, text)
    }

    /// A finite binary float, from its shortest round-trip text; non-finite values are `null`
    /// (JSON has no NaN or infinity; `serde_json` serializes them as `null` too).
    pub fn f64(&mut self, v: f64) {
        if v.is_finite() {
            let mut buf = ryu::Buffer::new();
            // ryu's text of a finite float is always a valid number text.
            let _ = self.number_text(buf.format_finite(v));
        } else {
            self.null();
        }
    }

    /// Like [`CanonicalWriter::f64`], for `f32` (from the `f32`'s own shortest text).
    pub fn f32(&mut self, v: f32) {
        if v.is_finite() {
            let mut buf = ryu::Buffer::new();
            let _ = self.number_text(buf.format_finite(v));
        } else {
            self.null();
        }
    }

    /// Bytes as a standard, padded base64 string.
    pub fn base64(&mut self, bytes: &[u8]) {
        use base64::Engine as _;
        let len = bytes.len().div_ceil(3) * 4;
        let dst = self.room(len + 2);
        dst[0] = b'"';
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(bytes, &mut dst[1..len + 1])
            .unwrap_or(0);
        dst[written + 1] = b'"';
        self.pos += written + 2;
    }

    /// `{`.
    #[inline(always)]
    pub fn begin_object(&mut self) {
        self.byte(b'{');
    }

    /// `}`.
    #[inline(always)]
    pub fn end_object(&mut self) {
        self.byte(b'}');
    }

    /// The separator (unless `first`) and `"name":` of an object member. Members must come in
    /// the byte order of their names.
    #[inline(always)]
    pub fn member(&mut self, first: &mut bool, name: &str) {
        // Two calls rather than one with a separator of either length: each copy then has a
        // length known at compile time.
        if core::mem::take(first) {
            self.quoted(b"", name, b":");
        } else {
            self.quoted(b",", name, b":");
        }
    }

    /// Opens a member of an object whose members are known when the program is compiled:
    /// `open` (`{"name":`) for the first member written, `next` (`,"name":`) for the others.
    /// The object ends with [`CanonicalWriter::close_object`]. Generated code calls it through
    /// `__private::open_member`.
    #[inline(always)]
    pub(crate) fn open_member(&mut self, first: &mut bool, open: &[u8], next: &[u8]) {
        self.raw(if core::mem::take(first) { open } else { next });
    }

    /// Ends an object opened by [`CanonicalWriter::open_member`]: `}`, or `{}` when no member
    /// was written (`first` is still `true`).
    #[inline(always)]
    pub(crate) fn close_object(&mut self, first: bool) {
        if first {
            self.raw(b"{}");
        } else {
            self.raw(b"}");
        }
    }

    /// The bytes written so far to the underlying buffer (including what it held before this
    /// writer was created).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    /// The length of [`CanonicalWriter::as_bytes`].
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Forgets what was written after `pos` (a [`CanonicalWriter::position`] taken earlier).
    #[inline]
    pub(crate) fn rewind(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }
}

/// [`CanonicalWriter::out_of_line`]'s function.
#[cold]
#[inline(never)]
fn cold_write(w: &mut CanonicalWriter<'_>, write: impl FnOnce(&mut CanonicalWriter<'_>)) {
    write(w);
}

impl Sink for CanonicalWriter<'_> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        self.raw(bytes);
    }

    #[inline(always)]
    fn put_byte(&mut self, b: u8) {
        self.byte(b);
    }

    #[inline(always)]
    fn put_repeat(&mut self, b: u8, n: usize) {
        self.room(n).fill(b);
        self.pos += n;
    }
}

#[cfg(test)]
mod tests {
    use super::CanonicalWriter;
    use crate::encode::RequestHash;

    #[test]
    fn appends_to_what_the_vector_held_and_hands_back_exactly_the_text() {
        let mut out = b"[1,".to_vec();
        out.reserve(1000);
        let mut w = CanonicalWriter::new(&mut out);
        w.str("a");
        w.raw(b"]");
        assert_eq!(w.as_bytes(), br#"[1,"a"]"#);
        drop(w);
        assert_eq!(out, br#"[1,"a"]"#);
    }

    #[test]
    fn grows_from_empty_through_many_writes() {
        let long = "x".repeat(10_000);
        let mut out = Vec::new();
        let mut w = CanonicalWriter::new(&mut out);
        w.raw(b"[");
        for i in 0..500 {
            w.integer(i);
            w.raw(b",");
            w.str(&long[..i]);
            w.raw(b",");
        }
        w.str(&long);
        w.raw(b"]");
        drop(w);
        let mut want = String::from("[");
        for i in 0..500 {
            want.push_str(&format!("{i},\"{}\",", &long[..i]));
        }
        want.push_str(&format!("\"{long}\"]"));
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn rewinds_to_a_position() {
        let mut out = Vec::new();
        let mut w = CanonicalWriter::new(&mut out);
        w.raw(b"[");
        let at = w.position();
        w.str("discarded");
        w.rewind(at);
        w.bool(true);
        w.raw(b"]");
        drop(w);
        assert_eq!(out, b"[true]");
    }

    #[test]
    fn base64_fills_its_room_exactly() {
        for len in 0..10 {
            let bytes = vec![0xfbu8; len];
            let mut out = Vec::new();
            let mut w = CanonicalWriter::new(&mut out);
            w.base64(&bytes);
            w.raw(b"!");
            drop(w);
            use base64::Engine as _;
            let want = base64::engine::general_purpose::STANDARD.encode(&bytes);
            assert_eq!(out, format!("\"{want}\"!").as_bytes());
        }
    }

    #[test]
    fn the_scratch_buffer_never_leaks_an_earlier_longer_text() {
        let long = RequestHash::of_canonical(|w| w.str(&"y".repeat(300)));
        let short = RequestHash::of_canonical(|w| w.str("y"));
        assert_eq!(
            long,
            RequestHash::of_bytes(format!("\"{}\"", "y".repeat(300)).as_bytes())
        );
        assert_eq!(short, RequestHash::of_bytes(br#""y""#));
    }

    #[test]
    fn a_text_rendered_inside_another_gets_its_own_buffer() {
        let inner = std::cell::Cell::new(None);
        let outer = RequestHash::of_canonical(|w| {
            w.raw(b"[");
            inner.set(Some(RequestHash::of_canonical(|w| w.str("inner"))));
            w.raw(b"]");
        });
        assert_eq!(outer, RequestHash::of_bytes(b"[]"));
        assert_eq!(inner.get(), Some(RequestHash::of_bytes(br#""inner""#)));
    }
}
