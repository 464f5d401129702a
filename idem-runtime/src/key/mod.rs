//! The idempotency key: what a client may send ([`parse_header_key`], [`validate_key`], one
//! error type, [`InvalidKey`]) and the key a store claims ([`ScopedKey`]: the client key scoped by
//! its caller and operation).
//!
//! Every front validates a key the same way: a header value is unquoted by
//! [`parse_header_key`], a key taken from the request itself (`key = msg.id`) is checked by
//! [`validate_key`], and [`ScopedKey::new`] checks again, so that no store ever sees a key that
//! breaks these rules, whoever built it.

mod header;
mod rules;
mod scope;
mod scoped;
#[cfg(test)]
mod tests;

pub use header::parse_header_key;
pub use rules::{InvalidKey, MAX_CLIENT_KEY_CHARS, validate_key};
pub use scope::{ScopePart, scoped_key, write_scope_part};
pub use scoped::ScopedKey;
