//! Paths used by generated code (`::idem::__private::...`). Not a public API.

pub use core::option::Option::{self, None, Some};
pub use core::primitive::{bool, str, u32};
pub use std::string::String;
pub use std::vec::Vec;

pub use crate::canonical::{Spec, ValueSpec, VariantSpec};
pub use crate::fingerprint::{
    Canonical, CanonicalWriter, Env, FieldMask, FieldRef, Fingerprint, Hashed, NoFields,
    RequestHash, Skipped, hashable,
};
