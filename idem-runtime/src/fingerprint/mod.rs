//! The compile-time fingerprint path: [`Canonical`] values written by a [`CanonicalWriter`],
//! [`Fingerprint`] request types (usually `#[derive(Fingerprint)]`), and the [`RequestHash`].
//!
//! The canonical form itself is specified in `docs/fingerprint.md`; the writer, the encoders of
//! numbers, strings, timestamps and bytes, and the hash are shared with the run-time path
//! ([`crate::json`], which produces the same bytes from a `serde_json::Value` under a
//! [`Spec`](crate::Spec)) and live in `crate::encode`. Here: the trait and its impls for standard
//! (`impls`) and third-party (`foreign`) types, the writer's methods over [`Canonical`] values
//! (`collections`), field adapters (`fields`), field masks (`subset`), and the `Fingerprint` of
//! values without named fields, hashed whole (`without_fields`).

mod collections;
pub(crate) mod fields;
mod foreign;
mod impls;
pub(crate) mod proto;
mod subset;
mod without_fields;

pub use crate::encode::{CanonicalWriter, ParseRequestHashError, RequestHash};
pub use subset::{Env, FieldMask, FieldRef, Hashable, Hashed, NoFields, Skipped, hashable};

use crate::json::ValueSpec;

/// A value with a canonical JSON form (see `docs/fingerprint.md`).
///
/// Implemented for integers, `bool`, strings, `Option`, tuples (as arrays), `Vec`, slices,
/// arrays, maps with string keys, sets, `serde_json::{Value, Map, Number}`,
/// `rust_decimal::Decimal` (feature `decimal`), `uuid::Uuid` (feature `uuid`), chrono's
/// `DateTime<Tz>` and `NaiveDate` (feature `chrono`), time's `OffsetDateTime`, `UtcDateTime` and
/// `Date` (feature `time`), and every type that derives [`Fingerprint`]. `f32`/`f64` are
/// deliberately **not** implemented: a binary float has no exact decimal form unless the field
/// opts in with `#[fingerprint(float)]`.
///
/// To implement it by hand, write the value's canonical text with the [`CanonicalWriter`]'s
/// methods in [`Canonical::write_canonical`]; an object's members must come in the byte order of
/// their names, with no `null` member. Override [`Canonical::is_null`] if some values are `null`,
/// and [`Canonical::value_spec`] if the text is not what the run-time path makes of the value's
/// serde JSON under [`ValueSpec::Any`]:
///
/// ```
/// use idem_runtime::{Canonical, CanonicalWriter, RequestHash, Spec, ValueSpec};
///
/// /// An amount in cents, fingerprinted as the decimal it stands for (`1050` -> `10.5`).
/// struct Cents(i64);
///
/// impl Canonical for Cents {
///     fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
///         w.decimal(i128::from(self.0), 2);
///     }
/// }
///
/// /// A money amount, as an object.
/// struct Money {
///     amount: Cents,
///     currency: String,
/// }
///
/// impl Canonical for Money {
///     fn write_canonical(&self, w: &mut CanonicalWriter<'_>) {
///         let mut first = true;
///         w.begin_object();
///         w.member(&mut first, "amount"); // members in the byte order of their names
///         self.amount.write_canonical(w);
///         w.member(&mut first, "currency");
///         self.currency.write_canonical(w);
///         w.end_object();
///     }
///
///     // Say it when the value's serde JSON needs a spec (here: if it were serialized with the
///     // amount as a decimal string such as `"10.50"`).
///     fn value_spec() -> ValueSpec {
///         ValueSpec::object(Spec::new().field("amount", ValueSpec::Decimal).field("currency", ValueSpec::Any))
///     }
/// }
///
/// let price = Money { amount: Cents(1050), currency: "EUR".into() };
/// let mut out = Vec::new();
/// price.write_canonical(&mut CanonicalWriter::new(&mut out));
/// assert_eq!(out, br#"{"amount":10.5,"currency":"EUR"}"#);
/// // A field of a `#[derive(Fingerprint)]` struct, or hashed on its own:
/// assert_eq!(
///     RequestHash::of_canonical(|w| price.write_canonical(w)),
///     RequestHash::of_bytes(br#"{"amount":10.5,"currency":"EUR"}"#),
/// );
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no canonical fingerprint form",
    label = "this type cannot be fingerprinted",
    note = "derive it with `#[derive(idem::Fingerprint)]`, mark the field `#[fingerprint(skip)]`, or write it with `#[fingerprint(with = path)]`",
    note = "binary floats need `#[fingerprint(float)]`; byte buffers usually want `#[fingerprint(base64)]`"
)]
pub trait Canonical {
    /// Writes the canonical JSON text of `self`.
    fn write_canonical(&self, w: &mut CanonicalWriter<'_>);

    /// `true` when `self` is JSON `null` (`None`); such an object member is omitted entirely, so
    /// `null` and an absent field fingerprint alike.
    #[inline]
    fn is_null(&self) -> bool {
        false
    }

    /// The run-time [`ValueSpec`] under which [`crate::json`] canonicalizes
    /// `serde_json::to_value(self)` to the same bytes as [`Canonical::write_canonical`]: what
    /// [`IdempotencyLayer::for_type`](crate::axum::IdempotencyLayer::for_type) (feature `axum`)
    /// hashes a raw body with. The derive and idem's impls give the exact spec (`Decimal` for a
    /// decimal, an object's whitelist, ...). The default, [`ValueSpec::Any`], fits a value whose
    /// serde JSON is its canonical text up to the general rules (key order, number form, `null`
    /// members); otherwise override it, or the run-time path hashes such a value differently.
    fn value_spec() -> ValueSpec {
        ValueSpec::Any
    }
}

/// A request type whose identity is a whitelist of its fields, hashed with SHA-256 over their
/// canonical JSON form.
///
/// Derive it; the attributes are documented on [`idem::Fingerprint`](../../idem/derive.Fingerprint.html).
/// Values that are not structs are fingerprinted whole (their canonical text): integers, `bool`,
/// `char`, strings, tuples of up to four [`Canonical`] values, `Vec`, slices, arrays, sets, maps
/// with string keys, `serde_json::{Value, Map}` and the feature types (`Decimal`, `Uuid`, the
/// chrono and time timestamps) — a path parameter or a JSON array body needs no wrapper type.
///
/// ```
/// use idem_runtime::{Fingerprint, RequestHash};
/// // A path parameter pair, and a JSON body that is not a struct.
/// let ids = ("acct_1".to_owned(), 42u64);
/// assert_eq!(ids.fingerprint(), RequestHash::of_bytes(br#"["acct_1",42]"#));
/// let body = serde_json::json!([{"qty": 2.0, "sku": "a"}]);
/// assert_eq!(body.canonical_json(), r#"[{"qty":2,"sku":"a"}]"#);
/// ```
pub trait Fingerprint: Canonical {
    /// One [`FieldRef`] per named field, so that `#[idempotent(fingerprint(fields = [..]))]` can
    /// check its list at compile time.
    #[doc(hidden)]
    type Fields;
    #[doc(hidden)]
    const FIELDS: Self::Fields;

    /// Writes the canonical object restricted to the fields in `mask`: the fields of
    /// [`Fingerprint::canonical_json`] whose bit is in `mask`, in the same order. Environment and
    /// skipped fields are never written, whatever the mask says. Types without named fields
    /// (enums, tuple structs) ignore the mask and write their whole canonical form.
    ///
    /// Build the mask with `idem::fields!(Type: a, b)`, which checks the names at compile time.
    fn write_fields(&self, w: &mut CanonicalWriter<'_>, mask: FieldMask);

    /// The canonical JSON text of the whitelisted fields.
    fn canonical_json(&self) -> String {
        crate::encode::render(
            |w| self.write_canonical(w),
            // The writer only emits UTF-8: strings are copied whole, everything else is ASCII.
            |text| match core::str::from_utf8(text) {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(text).into_owned(),
            },
        )
    }

    /// SHA-256 of [`Fingerprint::canonical_json`].
    fn fingerprint(&self) -> RequestHash {
        RequestHash::of_canonical(|w| self.write_canonical(w))
    }

    /// SHA-256 of the canonical object restricted to the fields in `mask`
    /// ([`Fingerprint::write_fields`]): the fingerprint of an endpoint whose identity is a subset
    /// of its request's fields.
    ///
    /// Build the mask with `idem::fields!(Type: a, b)`, which checks at compile time that every
    /// name is a field of `Type` and none is declared `env` or `skip`; the `idem` crate's
    /// documentation of `fields!` has a runnable example.
    fn fingerprint_fields(&self, mask: FieldMask) -> RequestHash {
        RequestHash::of_canonical(|w| self.write_fields(w, mask))
    }
}
