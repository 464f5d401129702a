//! [`CanonicalWriter`]: appends canonical JSON tokens to a byte buffer.

use super::Canonical;

/// Appends canonical JSON text (see `docs/fingerprint.md`) to a byte buffer.
///
/// Generated code and hand-written [`Canonical`] impls (`#[fingerprint(with = path)]`) use it; it
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
/// assert_eq!(out, br#"{"amount":100,"currency":"EUR"}"#);
/// ```
pub struct CanonicalWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> CanonicalWriter<'a> {
    /// A writer appending to `out`.
    #[inline]
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        CanonicalWriter { out }
    }

    /// Appends bytes that are already canonical JSON (no check is made).
    #[inline(always)]
    pub fn raw(&mut self, canonical: &[u8]) {
        self.out.extend_from_slice(canonical);
    }

    /// `null`.
    #[inline]
    pub fn null(&mut self) {
        self.raw(b"null");
    }

    /// `true` / `false`.
    #[inline]
    pub fn bool(&mut self, v: bool) {
        self.raw(if v { b"true" } else { b"false" });
    }

    /// A JSON string, quoted and minimally escaped.
    #[inline]
    pub fn str(&mut self, s: &str) {
        crate::canonical::text::write_escaped_str(self.out, s);
    }

    /// An integer in decimal.
    #[inline]
    pub fn integer<I: itoa::Integer>(&mut self, v: I) {
        let mut buf = itoa::Buffer::new();
        self.raw(buf.format(v).as_bytes());
    }

    /// A decimal `mantissa * 10^-scale`, canonical (no trailing fractional zeros, `-0` -> `0`).
    pub fn decimal(&mut self, mantissa: i128, scale: u32) {
        crate::canonical::number::write_decimal(self.out, mantissa, scale);
    }

    /// A number given as JSON number text or a decimal string (`"100.00"`, `"1e2"`, `"-0.10"`),
    /// written in canonical form.
    pub fn number_text(&mut self, text: &str) -> Result<(), crate::CanonicalError> {
        crate::canonical::number::write_number_text(self.out, text)
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
        self.out.push(b'"');
        let start = self.out.len();
        self.out.resize(start + bytes.len().div_ceil(3) * 4, 0);
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(bytes, &mut self.out[start..])
            .unwrap_or(0);
        self.out.truncate(start + written);
        self.out.push(b'"');
    }

    /// `{`.
    #[inline(always)]
    pub fn begin_object(&mut self) {
        self.out.push(b'{');
    }

    /// `}`.
    #[inline(always)]
    pub fn end_object(&mut self) {
        self.out.push(b'}');
    }

    /// The separator (unless `first`) and `"name":` of an object member. Members must come in
    /// the byte order of their names.
    #[inline]
    pub fn member(&mut self, first: &mut bool, name: &str) {
        if !core::mem::take(first) {
            self.out.push(b',');
        }
        self.str(name);
        self.out.push(b':');
    }

    /// Like [`CanonicalWriter::member`] with the name already rendered as `"name":`.
    #[doc(hidden)]
    #[inline(always)]
    pub fn member_raw(&mut self, first: &mut bool, quoted_name_colon: &[u8]) {
        if !core::mem::take(first) {
            self.out.push(b',');
        }
        self.raw(quoted_name_colon);
    }

    /// An array of the items, in order.
    pub fn array<'v, T: Canonical + 'v>(&mut self, items: impl IntoIterator<Item = &'v T>) {
        self.out.push(b'[');
        let mut first = true;
        for item in items {
            if !core::mem::take(&mut first) {
                self.out.push(b',');
            }
            item.write_canonical(self);
        }
        self.out.push(b']');
    }

    /// An array of the items sorted by their canonical text, equal texts written once (the
    /// canonical form of a set: `{b, a}` and `[a, b, a]` read into a set are both `["a","b"]`).
    pub fn sorted_array<'v, T: Canonical + 'v>(&mut self, items: impl IntoIterator<Item = &'v T>) {
        let mut rendered: Vec<Vec<u8>> = items
            .into_iter()
            .map(|item| {
                let mut buf = Vec::new();
                item.write_canonical(&mut CanonicalWriter::new(&mut buf));
                buf
            })
            .collect();
        rendered.sort_unstable();
        rendered.dedup();
        self.out.push(b'[');
        for (i, item) in rendered.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.raw(item);
        }
        self.out.push(b']');
    }

    /// An object from `(name, value)` entries in any order: entries are sorted by the UTF-8
    /// bytes of their names and null values are omitted. Names must be unique.
    pub fn object_entries<'v, K, V>(&mut self, entries: impl IntoIterator<Item = (K, &'v V)>)
    where
        K: AsRef<str>,
        V: Canonical + 'v,
    {
        let mut entries: Vec<(K, &V)> = entries.into_iter().filter(|(_, v)| !v.is_null()).collect();
        entries.sort_unstable_by(|a, b| a.0.as_ref().as_bytes().cmp(b.0.as_ref().as_bytes()));
        self.begin_object();
        let mut first = true;
        for (k, v) in entries {
            self.member(&mut first, k.as_ref());
            v.write_canonical(self);
        }
        self.end_object();
    }

    /// Like [`CanonicalWriter::object_entries`] for entries that usually come sorted by name
    /// already (a `BTreeMap` with string keys, a `serde_json::Map`): one pass checks the order, and
    /// only unsorted entries are collected and sorted.
    pub(crate) fn object_entries_presorted<'v, K, V, I>(&mut self, entries: I)
    where
        K: AsRef<str>,
        V: Canonical + 'v,
        I: IntoIterator<Item = (K, &'v V)>,
        I::IntoIter: Clone,
    {
        let entries = entries.into_iter();
        let mut names = entries.clone().map(|(k, _)| k);
        let sorted = match names.next() {
            None => true,
            Some(first) => names
                .try_fold(first, |prev, next| {
                    (prev.as_ref().as_bytes() < next.as_ref().as_bytes()).then_some(next)
                })
                .is_some(),
        };
        if !sorted {
            return self.object_entries(entries);
        }
        self.begin_object();
        let mut first = true;
        for (k, v) in entries {
            if !v.is_null() {
                self.member(&mut first, k.as_ref());
                v.write_canonical(self);
            }
        }
        self.end_object();
    }

    /// The bytes written so far to the underlying buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.out
    }

    #[doc(hidden)]
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        self.out
    }
}
