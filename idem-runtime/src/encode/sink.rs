//! [`Sink`]: where canonical text is appended — a `Vec<u8>` (the run-time canonicalizer) or a
//! [`CanonicalWriter`](crate::CanonicalWriter) (the derive), so that numbers, dates and escapes
//! are written by one implementation for both paths.

/// Appends bytes of canonical text.
pub(crate) trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);

    /// Appends one byte.
    fn put_byte(&mut self, b: u8);

    /// Appends `n` copies of `b`.
    fn put_repeat(&mut self, b: u8, n: usize);
}

impl Sink for Vec<u8> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    #[inline(always)]
    fn put_byte(&mut self, b: u8) {
        self.push(b);
    }

    #[inline]
    fn put_repeat(&mut self, b: u8, n: usize) {
        self.resize(self.len() + n, b);
    }
}
