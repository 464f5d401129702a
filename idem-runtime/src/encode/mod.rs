//! The canonical encoding shared by both ways of fingerprinting a request: the derive's
//! [`Canonical`](crate::Canonical) impls ([`crate::fingerprint`]) and the run-time path that
//! applies a [`Spec`](crate::Spec) to JSON ([`crate::json`]) write through the same encoders, so
//! that a value has one canonical text whichever path renders it (`docs/fingerprint.md`).
//!
//! - [`CanonicalWriter`] (`writer`): appends canonical JSON tokens to a byte buffer.
//! - `sink`: where the encoders below append, a `Vec<u8>` or a [`CanonicalWriter`].
//! - `number`: exact decimal numbers; `text`: string escaping; `datetime`: RFC 3339 timestamps
//!   and dates; `scalar`: base64 bytes and UUIDs.
//! - [`CanonicalError`] (`error`): why a text has no canonical form, with its JSON path.
//! - [`RequestHash`] (`hash`): the SHA-256 of a canonical text.
//!
//! Nothing here depends on the two fronts: they import it, never the other way round.

pub(crate) mod datetime;
mod error;
mod hash;
pub(crate) mod number;
pub(crate) mod scalar;
pub(crate) mod sink;
pub(crate) mod text;
mod writer;

pub use error::CanonicalError;
pub(crate) use error::{Path, truncate};
pub use hash::{ParseRequestHashError, RequestHash};
pub(crate) use hash::{hex_byte, render};
pub use writer::CanonicalWriter;
