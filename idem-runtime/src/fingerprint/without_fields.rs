//! [`Fingerprint`] for types that are fingerprinted whole: scalars, strings, tuples, sequences,
//! maps, JSON values and the feature types. `#[idempotent]` can then hash a path parameter
//! (`Path(id): Path<Uuid>` with `fingerprint(arg = id)`), a tuple of them, or a JSON body that is
//! not a struct (`Json<Vec<Item>>`, `Json<serde_json::Value>`) without a wrapper type.
//!
//! They have no named fields ([`NoFields`]): `fingerprint(fields = [..])` does not apply to them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{Canonical, CanonicalWriter, FieldMask, Fingerprint, NoFields};

// `do_not_recommend`: a request type that forgot `#[derive(Fingerprint)]` gets the error about
// itself, not a list of these impls.
macro_rules! whole {
    ($($(#[$m:meta])* [$($g:tt)*] $t:ty;)*) => {$(
        $(#[$m])*
        #[diagnostic::do_not_recommend]
        impl<$($g)*> Fingerprint for $t {
            type Fields = NoFields;
            const FIELDS: NoFields = NoFields;

            #[inline]
            fn write_fields(&self, w: &mut CanonicalWriter<'_>, _: FieldMask) {
                self.write_canonical(w);
            }
        }
    )*};
}

whole! {
    [] u8; [] u16; [] u32; [] u64; [] u128; [] usize;
    [] i8; [] i16; [] i32; [] i64; [] i128; [] isize;
    [] bool; [] char; [] str; [] String; [] ();
    [T: Canonical + ToOwned + ?Sized] Cow<'_, T>;
    [A: Canonical] (A,);
    [A: Canonical, B: Canonical] (A, B);
    [A: Canonical, B: Canonical, C: Canonical] (A, B, C);
    [A: Canonical, B: Canonical, C: Canonical, D: Canonical] (A, B, C, D);
    [T: Canonical] [T];
    [T: Canonical, const N: usize] [T; N];
    [T: Canonical] Vec<T>;
    [T: Canonical, S] HashSet<T, S>;
    [T: Canonical] BTreeSet<T>;
    [K: AsRef<str>, V: Canonical, S] HashMap<K, V, S>;
    [K: AsRef<str>, V: Canonical] BTreeMap<K, V>;
    [] serde_json::Value;
    [] serde_json::Map<String, serde_json::Value>;
    #[cfg(feature = "decimal")] [] rust_decimal::Decimal;
    #[cfg(feature = "uuid")] [] uuid::Uuid;
    #[cfg(feature = "chrono")] [Tz: chrono::TimeZone] chrono::DateTime<Tz>;
    #[cfg(feature = "chrono")] [] chrono::NaiveDate;
    #[cfg(feature = "time")] [] time::OffsetDateTime;
    #[cfg(feature = "time")] [] time::UtcDateTime;
    #[cfg(feature = "time")] [] time::Date;
    #[cfg(feature = "axum")] [] http::Uri;
}
