//! [`CanonicalWriter`] methods that write [`Canonical`] values: arrays, sets and maps.
//!
//! They live with the trait rather than with the writer, so that the writer (`crate::encode`)
//! knows nothing of the values written through it.

use super::Canonical;
use crate::encode::CanonicalWriter;

impl CanonicalWriter<'_> {
    /// An array of the items, in order.
    pub fn array<'v, T: Canonical + 'v>(&mut self, items: impl IntoIterator<Item = &'v T>) {
        self.raw(b"[");
        let mut first = true;
        for item in items {
            if !core::mem::take(&mut first) {
                self.raw(b",");
            }
            item.write_canonical(self);
        }
        self.raw(b"]");
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
        self.raw(b"[");
        for (i, item) in rendered.iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.raw(item);
        }
        self.raw(b"]");
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
        let mut first = true;
        for (k, v) in entries {
            self.entry(&mut first, k.as_ref(), v);
        }
        self.close_object(first);
    }

    /// Like [`CanonicalWriter::object_entries`] for entries that usually come sorted by name
    /// already (a `BTreeMap` with string keys, a `serde_json::Map`): they are written in one pass
    /// that checks the order as it goes; only if it finds two names out of order is the object
    /// written again by [`CanonicalWriter::object_entries`].
    #[inline]
    pub(crate) fn object_entries_presorted<'v, K, V, I>(&mut self, entries: I)
    where
        K: AsRef<str>,
        V: Canonical + 'v,
        I: IntoIterator<Item = (K, &'v V)>,
        I::IntoIter: Clone,
    {
        let entries = entries.into_iter();
        let start = self.position();
        let mut first = true;
        let mut prev: Option<K> = None;
        for (k, v) in entries.clone() {
            if prev
                .as_ref()
                .is_some_and(|p| !sorts_before(p.as_ref().as_bytes(), k.as_ref().as_bytes()))
            {
                // Out of order: write the object again from `start`, sorted.
                return self.out_of_line(start, |w| w.object_entries(entries));
            }
            if !v.is_null() {
                self.entry(&mut first, k.as_ref(), v);
            }
            prev = Some(k);
        }
        self.close_object(first);
    }

    /// One member of an object written at run time: `{` (the first) or `,`, the quoted name, `:`
    /// and the value. The object ends with [`CanonicalWriter::close_object`].
    #[inline(always)]
    fn entry<V: Canonical + ?Sized>(&mut self, first: &mut bool, name: &str, value: &V) {
        // `{` or `,` before the name: one byte either way, so one copy of known length.
        let open: &[u8] = if core::mem::take(first) { b"{" } else { b"," };
        self.quoted(open, name, b":");
        value.write_canonical(self);
    }
}

/// Whether `a` sorts strictly before `b` in byte order: `a < b`, compared inline (eight bytes at
/// a time) rather than by a call to `memcmp`, which would make the caller save and reload its
/// registers around it; map keys are short.
#[inline(always)]
fn sorts_before(a: &[u8], b: &[u8]) -> bool {
    let (mut a_rest, mut b_rest) = (a, b);
    while let (Some((wa, ra)), Some((wb, rb))) = (
        a_rest.split_first_chunk::<8>(),
        b_rest.split_first_chunk::<8>(),
    ) {
        if wa != wb {
            return u64::from_be_bytes(*wa) < u64::from_be_bytes(*wb);
        }
        (a_rest, b_rest) = (ra, rb);
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        if x != y {
            return x < y;
        }
    }
    a_rest.len() < b_rest.len()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::fingerprint::{Canonical, CanonicalWriter};

    /// A key whose `Ord` is not the byte order of its text.
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct Reversed(std::cmp::Reverse<String>);

    impl AsRef<str> for Reversed {
        fn as_ref(&self) -> &str {
            &self.0.0
        }
    }

    #[test]
    fn maps_whose_order_is_not_byte_order_are_sorted_anyway() {
        let key = |s: &str| Reversed(std::cmp::Reverse(s.to_owned()));
        let map = BTreeMap::from([(key("a"), 1), (key("c"), 3), (key("b"), 2)]);
        let mut out = b"x".to_vec();
        map.write_canonical(&mut CanonicalWriter::new(&mut out));
        assert_eq!(out, br#"x{"a":1,"b":2,"c":3}"#);
    }

    /// A value that panics when written, if told to.
    struct Explodes(bool);

    impl Canonical for Explodes {
        fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
            assert!(!self.0, "no canonical text");
            w.null();
        }
    }

    #[test]
    fn a_panic_in_the_unsorted_map_fallback_keeps_the_text_written_before() {
        // Iterated as `b`, `a`: `b` is written, then `a` sends the object to the out-of-line
        // fallback, which sorts it and panics at `a`'s value. The fallback used to take the
        // buffer by value, and a panic dropped it: the caller's vector came back empty. It comes
        // back as it was before the writer, like after any panic.
        let key = |s: &str| Reversed(std::cmp::Reverse(s.to_owned()));
        let map = BTreeMap::from([(key("a"), Explodes(true)), (key("b"), Explodes(false))]);
        let mut out = b"[1,".to_vec();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            map.write_canonical(&mut CanonicalWriter::new(&mut out));
        }));
        assert!(panicked.is_err());
        assert_eq!(out, b"[1,");
        // The vector is usable afterwards.
        7u8.write_canonical(&mut CanonicalWriter::new(&mut out));
        assert_eq!(out, b"[1,7");
    }

    #[test]
    fn map_entries_of_strings_escape_their_keys_and_values() {
        for (key, value) in [
            ("k", "v"),
            ("k\"", "v"),
            ("k", "v\n"),
            ("\\k", "\u{1}v"),
            ("", ""),
        ] {
            let map = BTreeMap::from([
                ("a".to_owned(), value.to_owned()),
                (key.to_owned(), value.to_owned()),
            ]);
            let mut out = Vec::new();
            map.write_canonical(&mut CanonicalWriter::new(&mut out));
            let want = serde_json::to_string(&map).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), want, "{key:?}: {value:?}");
        }
        let options = BTreeMap::from([("a", Some("x")), ("b", None), ("c", Some("y\t"))]);
        let mut out = Vec::new();
        options.write_canonical(&mut CanonicalWriter::new(&mut out));
        assert_eq!(out, br#"{"a":"x","c":"y\t"}"#);
    }

    #[test]
    fn keys_compare_in_byte_order() {
        let words = [
            "",
            "a",
            "b",
            "ab",
            "abc",
            "abcdefgh",
            "abcdefgi",
            "abcdefgh0",
            "abcdefghij",
            "abcdefghijklmnopq",
            "abcdefghijklmnopr",
            "channel",
            "campaign",
            "é",
            "z\u{7f}",
        ];
        for a in words {
            for b in words {
                assert_eq!(
                    super::sorts_before(a.as_bytes(), b.as_bytes()),
                    a.as_bytes() < b.as_bytes(),
                    "{a:?} < {b:?}"
                );
            }
        }
    }
}
