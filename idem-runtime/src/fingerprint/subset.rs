//! The hidden interface between `#[derive(Fingerprint)]` and the macros that name fields of a
//! request type (`#[idempotent(fingerprint(fields = [..]))]`, `idem::fields!`).
//!
//! The derive generates, next to the type, a struct with one public [`FieldRef`] per named field
//! (its `Fingerprint::Fields`). A macro that names field `amount` emits
//! `::idem::__private::hashable(<T as Fingerprint>::FIELDS.amount)` spanned on the user's token:
//! - an unknown name fails as "no field `amount` on type ..." (rustc lists the fields that exist);
//! - a field declared `env` or `skip` fails the [`Hashable`] bound, whose message explains why.

use core::marker::PhantomData;

/// A set of fields of one [`super::Fingerprint`] type, by bit (declaration order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldMask(pub u128);

impl FieldMask {
    /// Every field.
    pub const ALL: FieldMask = FieldMask(u128::MAX);

    /// Whether field `bit` is in the set.
    #[inline(always)]
    pub const fn contains(self, bit: u32) -> bool {
        self.0 & (1u128 << bit) != 0
    }

    /// The union of two sets.
    #[inline]
    pub const fn with(self, other: FieldMask) -> FieldMask {
        FieldMask(self.0 | other.0)
    }
}

/// A named field of a [`super::Fingerprint`] type; `K` says how the derive treats it.
#[derive(Debug)]
pub struct FieldRef<K> {
    bit: u32,
    kind: PhantomData<K>,
}

impl<K> Clone for FieldRef<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for FieldRef<K> {}

impl<K> FieldRef<K> {
    #[doc(hidden)]
    pub const fn new(bit: u32) -> Self {
        FieldRef {
            bit,
            kind: PhantomData,
        }
    }

    /// The field's bit in a [`FieldMask`].
    pub const fn mask(self) -> FieldMask {
        FieldMask(1u128 << self.bit)
    }
}

/// Kind of a field that is part of the fingerprint.
#[derive(Debug, Clone, Copy)]
pub enum Hashed {}
/// Kind of a field declared `#[fingerprint(env)]`: it varies per attempt and is never hashed.
#[derive(Debug, Clone, Copy)]
pub enum Env {}
/// Kind of a field declared `#[fingerprint(skip)]` (or `#[serde(skip)]`): not part of the
/// operation's identity.
#[derive(Debug, Clone, Copy)]
pub enum Skipped {}

/// `Fingerprint::Fields` of types without named fields (enums).
#[derive(Debug, Clone, Copy)]
pub struct NoFields;

/// Field kinds that may be listed in `fingerprint(fields = [..])`.
#[diagnostic::on_unimplemented(
    message = "this field is never hashed (field kind `{Self}`), so it cannot be listed in a fingerprint subset",
    label = "declared `#[fingerprint(env)]` or `#[fingerprint(skip)]` (or `#[serde(skip)]`)",
    note = "an environment field (client ip, timestamp, signature, ...) differs on every retry: hashing it turns each retry into a 422 conflict and the client retries forever (a retry storm)",
    note = "remove it from the list; if it really identifies the operation, declare it `#[fingerprint(include)]` instead of `env` or `skip`"
)]
pub trait Hashable {}
impl Hashable for Hashed {}

/// Checks at compile time that `field` may be hashed, and returns its bit.
#[inline(always)]
pub const fn hashable<K: Hashable>(field: FieldRef<K>) -> FieldMask {
    field.mask()
}
