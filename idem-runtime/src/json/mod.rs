//! Fingerprints of JSON requests, at run time: a request's canonical text and fingerprint
//! computed from its JSON (a `serde_json::Value` or a raw body) under a [`Spec`] (which fields
//! are whitelisted, which are environment fields, which strings are decimals, bytes, timestamps
//! or UUIDs). It gives the same bytes as `#[derive(Fingerprint)]` on a typed value, through the
//! same encoders.
//!
//! It serves raw JSON bodies (the tower layer), clients in other languages (the test vectors in
//! `tests/vectors/fingerprint.json` are its reference) and the property test that ties it to the
//! derive. The canonical form is specified in `docs/fingerprint.md`.
//!
//! ```
//! use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice, fingerprint_slice};
//! let spec = Spec::from_json_str(r#"{
//!     "amount": "decimal", "currency": "any", "client_ip": "env"
//! }"#).unwrap();
//! let body = br#"{"currency":"EUR","amount":100.00,"client_ip":"1.2.3.4","note":null}"#;
//! assert_eq!(canonicalize_slice(body, &spec).unwrap(), r#"{"amount":100,"currency":"EUR"}"#);
//! assert_eq!(
//!     fingerprint_slice(body, &spec).unwrap(),
//!     idem_runtime::RequestHash::of_bytes(br#"{"amount":100,"currency":"EUR"}"#),
//! );
//! ```
//!
//! Which entry point: [`canonicalize_slice`] for a body as received (exact for every number);
//! [`canonicalize`] when only a `serde_json::Value` is at hand — it gives the same bytes for
//! integers within `i64`/`u64` and for decimals that are the shortest text of their `f64` (`0.1`,
//! `100.25`), but serde_json (without its `arbitrary_precision` feature) has already rounded other
//! numbers to `f64` when parsing, and an `f64` is written by its shortest text:
//! `18446744073709551616` (2^64) comes out as `18446744073709552000`.

mod apply;
mod parse;
mod spec;
mod spec_json;
#[cfg(test)]
mod tests;
mod tree;

pub use crate::encode::CanonicalError;
pub use spec::{Spec, ValueSpec, VariantSpec};

use crate::encode::RequestHash;

/// Options of the run-time canonicalizer. The free functions ([`canonicalize`], ...) use
/// [`Canonicalizer::new`]'s defaults.
///
/// ```
/// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
/// let strict = Canonicalizer::new().max_depth(8).deny_unknown_fields(true);
/// let spec = Spec::new().field("amount", ValueSpec::Decimal).env("client_ip");
/// assert!(strict.canonicalize_slice(br#"{"amount":1,"client_ip":"::1"}"#, &spec).is_ok());
/// let err = strict.canonicalize_slice(br#"{"amuont":1}"#, &spec).unwrap_err();
/// assert_eq!(err.kind(), "unknown_field");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Canonicalizer {
    max_depth: usize,
    deny_unknown_fields: bool,
}

impl Default for Canonicalizer {
    fn default() -> Self {
        Canonicalizer::new()
    }
}

impl Canonicalizer {
    /// Nesting limit of [`Canonicalizer::new`].
    pub const DEFAULT_MAX_DEPTH: usize = 64;

    /// Largest accepted [`Canonicalizer::max_depth`] (the parser recurses once per level).
    pub const MAX_MAX_DEPTH: usize = 512;

    /// Defaults: nesting limit 64, members outside the spec dropped silently.
    ///
    /// ```
    /// use idem_runtime::json::Canonicalizer;
    /// assert_eq!(Canonicalizer::new(), Canonicalizer::default());
    /// ```
    pub const fn new() -> Self {
        Canonicalizer {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            deny_unknown_fields: false,
        }
    }

    /// Rejects input whose arrays and objects nest deeper than `depth` levels (the top-level
    /// object is level 1), anywhere in the body, whitelisted or not. Clamped to
    /// [`Canonicalizer::MAX_MAX_DEPTH`].
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec};
    /// let c = Canonicalizer::new().max_depth(2);
    /// assert!(c.canonicalize_slice(br#"{"a":[1]}"#, &Spec::new()).is_ok());
    /// let err = c.canonicalize_slice(br#"{"a":[[1]]}"#, &Spec::new()).unwrap_err();
    /// assert_eq!((err.kind(), err.path()), ("too_deep", Some("$.a[0]")));
    /// ```
    #[must_use]
    pub const fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = if depth > Self::MAX_MAX_DEPTH {
            Self::MAX_MAX_DEPTH
        } else {
            depth
        };
        self
    }

    /// With `true`, a member of an [`ValueSpec::Object`] (or of the top level) that is neither
    /// whitelisted nor an environment field is an error instead of being dropped: catches typos
    /// (`amuont`) that would otherwise leave a field out of the fingerprint.
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
    /// let spec = Spec::new().field("a", ValueSpec::Any);
    /// let c = Canonicalizer::new().deny_unknown_fields(true);
    /// let err = c.canonicalize_slice(br#"{"a":1,"b":2}"#, &spec).unwrap_err();
    /// assert_eq!(err.to_string(), "at `$`: member `b` is neither part of the fingerprint nor an environment field: fix its name, or add it to the spec (as a field, or as `env`)");
    /// ```
    #[must_use]
    pub const fn deny_unknown_fields(mut self, deny: bool) -> Self {
        self.deny_unknown_fields = deny;
        self
    }

    fn rules(&self) -> apply::Rules {
        apply::Rules {
            deny_unknown_fields: self.deny_unknown_fields,
        }
    }

    /// Appends the canonical text of `value` (a JSON object) under `spec` to `out`. On error,
    /// `out` may hold a partial text.
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
    /// let mut out = Vec::new();
    /// let value = serde_json::json!({"b": [1.50, null], "a": "x"});
    /// let spec = Spec::new().field("a", ValueSpec::Any).field("b", ValueSpec::Any);
    /// Canonicalizer::new().write_canonical(&value, &spec, &mut out).unwrap();
    /// assert_eq!(out, br#"{"a":"x","b":[1.5,null]}"#);
    /// ```
    pub fn write_canonical(
        &self,
        value: &serde_json::Value,
        spec: &Spec,
        out: &mut Vec<u8>,
    ) -> Result<(), CanonicalError> {
        let root = tree::from_value(value, self.max_depth)?;
        self.rules().root(&root, spec, out)
    }

    /// Appends the canonical text of the raw JSON body `json` (an object) under `spec` to `out`.
    /// On error, `out` may hold a partial text.
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
    /// let mut out = Vec::new();
    /// let spec = Spec::new().field("n", ValueSpec::Any);
    /// Canonicalizer::new().write_canonical_slice(br#"{"n":123456789012345678901234.50}"#, &spec, &mut out).unwrap();
    /// assert_eq!(out, br#"{"n":123456789012345678901234.5}"#);
    /// ```
    pub fn write_canonical_slice(
        &self,
        json: &[u8],
        spec: &Spec,
        out: &mut Vec<u8>,
    ) -> Result<(), CanonicalError> {
        let root = parse::parse(json, self.max_depth)?;
        self.rules().root(&root, spec, out)
    }

    /// The canonical text of `value` under `spec`; see [`canonicalize`].
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
    /// let spec = Spec::new().field("a", ValueSpec::Any);
    /// let text = Canonicalizer::new().canonicalize(&serde_json::json!({"a": 1e2}), &spec).unwrap();
    /// assert_eq!(text, r#"{"a":100}"#);
    /// ```
    pub fn canonicalize(
        &self,
        value: &serde_json::Value,
        spec: &Spec,
    ) -> Result<String, CanonicalError> {
        let mut out = Vec::with_capacity(128);
        self.write_canonical(value, spec, &mut out)?;
        Ok(into_string(out))
    }

    /// The canonical text of the raw body `json` under `spec`; see [`canonicalize_slice`].
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
    /// let spec = Spec::new().field("a", ValueSpec::Any);
    /// let text = Canonicalizer::new().canonicalize_slice(br#"{"a":1E2}"#, &spec).unwrap();
    /// assert_eq!(text, r#"{"a":100}"#);
    /// ```
    pub fn canonicalize_slice(&self, json: &[u8], spec: &Spec) -> Result<String, CanonicalError> {
        let mut out = Vec::with_capacity(json.len().min(4096));
        self.write_canonical_slice(json, spec, &mut out)?;
        Ok(into_string(out))
    }

    /// SHA-256 of [`Canonicalizer::canonicalize`].
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
    /// use idem_runtime::RequestHash;
    /// let spec = Spec::new().field("a", ValueSpec::Any);
    /// let hash = Canonicalizer::new().fingerprint(&serde_json::json!({"a": 1}), &spec).unwrap();
    /// assert_eq!(hash, RequestHash::of_bytes(br#"{"a":1}"#));
    /// ```
    pub fn fingerprint(
        &self,
        value: &serde_json::Value,
        spec: &Spec,
    ) -> Result<RequestHash, CanonicalError> {
        let mut out = Vec::with_capacity(128);
        self.write_canonical(value, spec, &mut out)?;
        Ok(RequestHash::of_bytes(&out))
    }

    /// SHA-256 of [`Canonicalizer::canonicalize_slice`].
    ///
    /// ```
    /// use idem_runtime::json::{Canonicalizer, Spec, ValueSpec};
    /// use idem_runtime::RequestHash;
    /// let spec = Spec::new().field("a", ValueSpec::Any);
    /// let hash = Canonicalizer::new().fingerprint_slice(br#"{"a":1.0}"#, &spec).unwrap();
    /// assert_eq!(hash, RequestHash::of_bytes(br#"{"a":1}"#));
    /// ```
    pub fn fingerprint_slice(
        &self,
        json: &[u8],
        spec: &Spec,
    ) -> Result<RequestHash, CanonicalError> {
        let mut out = Vec::with_capacity(json.len().min(4096));
        self.write_canonical_slice(json, spec, &mut out)?;
        Ok(RequestHash::of_bytes(&out))
    }
}

/// The canonical JSON text of `value` (which must be an object) restricted to `spec`'s
/// whitelist, with the default [`Canonicalizer`].
///
/// Numbers are taken from the `Value` as they are: integers exactly, floats by their shortest
/// round-trip text (`0.1`, not the exact value of the `f64` nearest to it); use
/// [`canonicalize_slice`] on the raw body for long decimals and integers beyond `u64`.
///
/// ```
/// use idem_runtime::json::{Spec, ValueSpec, canonicalize};
/// let spec = Spec::new()
///     .field("amount", ValueSpec::Decimal)
///     .field("currency", ValueSpec::Any)
///     .env("client_ip");
/// let body = serde_json::json!({
///     "amount": "100.00", "currency": "EUR", "client_ip": "1.2.3.4", "note": null,
/// });
/// assert_eq!(canonicalize(&body, &spec).unwrap(), r#"{"amount":100,"currency":"EUR"}"#);
/// ```
pub fn canonicalize(value: &serde_json::Value, spec: &Spec) -> Result<String, CanonicalError> {
    Canonicalizer::new().canonicalize(value, spec)
}

/// SHA-256 of [`canonicalize`]: the request hash.
///
/// ```
/// use idem_runtime::json::{Spec, ValueSpec, fingerprint};
/// let spec = Spec::new().field("amount", ValueSpec::Decimal);
/// let a = fingerprint(&serde_json::json!({"amount": 100}), &spec).unwrap();
/// let b = fingerprint(&serde_json::json!({"amount": "100.00", "ts": 1}), &spec).unwrap();
/// assert_eq!(a, b);
/// assert_eq!(a.to_string().len(), 64);
/// ```
pub fn fingerprint(value: &serde_json::Value, spec: &Spec) -> Result<RequestHash, CanonicalError> {
    Canonicalizer::new().fingerprint(value, spec)
}

/// The canonical JSON text of a raw JSON body (an object) under `spec`, with the default
/// [`Canonicalizer`]. The body is parsed strictly (RFC 8259: UTF-8, no comments, no trailing
/// commas, no leading zeros, no duplicate member names) and its numbers are kept exact.
///
/// ```
/// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
/// let spec = Spec::new().field("amount", ValueSpec::Decimal);
/// let body = br#"{"amount": 12345678901234567890.10}"#;
/// assert_eq!(canonicalize_slice(body, &spec).unwrap(), r#"{"amount":12345678901234567890.1}"#);
/// assert_eq!(canonicalize_slice(b"{\"amount\": 01}", &spec).unwrap_err().kind(), "invalid_json");
/// ```
pub fn canonicalize_slice(json: &[u8], spec: &Spec) -> Result<String, CanonicalError> {
    Canonicalizer::new().canonicalize_slice(json, spec)
}

/// SHA-256 of [`canonicalize_slice`]: the request hash of a raw body.
///
/// ```
/// use idem_runtime::json::{Spec, ValueSpec, fingerprint_slice};
/// let spec = Spec::new().field("amount", ValueSpec::Decimal).env("timestamp");
/// let first = fingerprint_slice(br#"{"amount":100,"timestamp":1}"#, &spec).unwrap();
/// let retry = fingerprint_slice(br#"{"timestamp":2,"amount":1e2}"#, &spec).unwrap();
/// assert_eq!(first, retry);
/// ```
pub fn fingerprint_slice(json: &[u8], spec: &Spec) -> Result<RequestHash, CanonicalError> {
    Canonicalizer::new().fingerprint_slice(json, spec)
}

/// The canonicalizer only emits UTF-8: strings are copied whole, everything else is ASCII.
fn into_string(out: Vec<u8>) -> String {
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
