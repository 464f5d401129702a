//! [`Canonical`] for standard types (third-party types: `foreign.rs`).
//!
//! Maps are objects: their keys must be strings (`AsRef<str>`). Integer keys, which serde_json
//! writes as strings, are not supported: an impl for them would overlap the `AsRef<str>` one
//! under coherence rules; convert them to strings, or write the map with
//! `#[fingerprint(with = path)]`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use super::{Canonical, CanonicalWriter};
use crate::json::ValueSpec;

macro_rules! integers {
    ($($t:ty)*) => {$(
        impl Canonical for $t {
            #[inline]
            fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
                w.integer(*self);
            }
            fn value_spec() -> ValueSpec {
                ValueSpec::Any
            }
        }
    )*};
}
integers!(u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize);

impl Canonical for bool {
    #[inline]
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.bool(*self);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

impl Canonical for char {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.str(self.encode_utf8(&mut [0; 4]));
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

macro_rules! strings {
    ($($t:ty)*) => {$(
        impl Canonical for $t {
            #[inline(always)]
            fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
                w.str(self);
            }
            fn value_spec() -> ValueSpec {
                ValueSpec::Any
            }
        }
    )*};
}
strings!(str String);

impl Canonical for () {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.null();
    }
    fn is_null(&self) -> bool {
        true
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

impl<T: Canonical> Canonical for Option<T> {
    #[inline]
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        match self {
            Some(v) => v.write_canonical(w),
            None => w.null(),
        }
    }
    #[inline]
    fn is_null(&self) -> bool {
        match self {
            Some(v) => v.is_null(),
            None => true,
        }
    }
    fn value_spec() -> ValueSpec {
        T::value_spec()
    }
}

macro_rules! deref_impls {
    ($($(#[$m:meta])* [$($g:tt)*] $t:ty;)*) => {$(
        $(#[$m])*
        impl<$($g)*> Canonical for $t {
            #[inline]
            fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
                (**self).write_canonical(w)
            }
            #[inline]
            fn is_null(&self) -> bool {
                (**self).is_null()
            }
            fn value_spec() -> ValueSpec {
                T::value_spec()
            }
        }
    )*};
}
deref_impls! {
    [T: Canonical + ?Sized] &T;
    [T: Canonical + ?Sized] &mut T;
    [T: Canonical + ?Sized] Box<T>;
    [T: Canonical + ?Sized] Rc<T>;
    [T: Canonical + ?Sized] Arc<T>;
    [T: Canonical + ToOwned + ?Sized] Cow<'_, T>;
}

/// Tuples are arrays, as serde writes them: `(1, "a")` is `[1,"a"]`.
macro_rules! tuples {
    ($(($($t:ident $i:tt),+))*) => {$(
        impl<$($t: Canonical),+> Canonical for ($($t,)+) {
            fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
                w.raw(b"[");
                let mut first = true;
                $(
                    if !core::mem::take(&mut first) {
                        w.raw(b",");
                    }
                    self.$i.write_canonical(w);
                )+
                w.raw(b"]");
            }
            fn value_spec() -> ValueSpec {
                ValueSpec::Tuple(vec![$($t::value_spec()),+])
            }
        }
    )*};
}
tuples! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
}

impl<T: Canonical> Canonical for [T] {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.array(self);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Array(Box::new(T::value_spec()))
    }
}

impl<T: Canonical, const N: usize> Canonical for [T; N] {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.array(self);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Array(Box::new(T::value_spec()))
    }
}

impl<T: Canonical> Canonical for Vec<T> {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.array(self);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Array(Box::new(T::value_spec()))
    }
}

impl<T: Canonical, S> Canonical for HashSet<T, S> {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.sorted_array(self);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Set(Box::new(T::value_spec()))
    }
}

impl<T: Canonical> Canonical for BTreeSet<T> {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        // `Ord` of `T` is not the byte order of canonical texts (`10 < 9` as text), so sort anyway.
        w.sorted_array(self);
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Set(Box::new(T::value_spec()))
    }
}

impl<K: AsRef<str>, V: Canonical, S> Canonical for HashMap<K, V, S> {
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        w.object_entries(self.iter().map(|(k, v)| (k.as_ref(), v)));
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Map(Box::new(V::value_spec()))
    }
}

impl<K: AsRef<str>, V: Canonical> Canonical for BTreeMap<K, V> {
    #[inline]
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
        // `String`'s order is byte order: no sorting (and no allocation) for the usual keys.
        w.object_entries_presorted(self.iter().map(|(k, v)| (k.as_ref(), v)));
    }
    fn value_spec() -> ValueSpec {
        ValueSpec::Map(Box::new(V::value_spec()))
    }
}
