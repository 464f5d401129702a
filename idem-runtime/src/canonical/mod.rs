//! The run-time canonicalizer: the same canonical bytes as `#[derive(Fingerprint)]`, computed from
//! a `serde_json::Value` under a [`Spec`] (which fields are whitelisted, which are environment
//! fields, which strings are decimals or base64).
//!
//! It serves raw JSON bodies (the tower layer), clients in other languages (the test vectors in
//! `tests/vectors/fingerprint.json` are its reference) and the property test that ties it to the
//! derive. The canonical form is specified in `docs/fingerprint.md`.

pub(crate) mod number;
pub(crate) mod text;

/// How a JSON value is canonicalized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueSpec {
    /// By the general rules only: objects sorted, nulls omitted, numbers exact decimals.
    Any,
    /// A number or a decimal string (`"100.00"`), written as a canonical number (`100`).
    Decimal,
    /// Bytes: a base64 string or an array of integers 0..=255, written as padded standard base64.
    Base64,
    /// An RFC 3339 date-time, written in UTC with `Z` and no trailing fractional zeros.
    Timestamp,
    /// A UUID string, written lowercase and hyphenated.
    Uuid,
    /// An array whose elements follow the inner spec, in order.
    Array(Box<ValueSpec>),
    /// An array whose elements follow the inner spec, sorted by their canonical text.
    Set(Box<ValueSpec>),
    /// An object with arbitrary member names whose values follow the inner spec.
    Map(Box<ValueSpec>),
    /// An object with a whitelist of fields.
    Object(Spec),
    /// An externally tagged enum (serde's default): `"Variant"` or `{"Variant": payload}`.
    Enum(Vec<VariantSpec>),
}

/// One variant of a [`ValueSpec::Enum`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantSpec {
    /// The variant's wire name.
    pub name: String,
    /// The payload's spec; `None` for a unit variant.
    pub payload: Option<ValueSpec>,
}

/// A whitelist of object fields: only the fields listed with [`Spec::field`] are part of the
/// canonical form; fields listed with [`Spec::env`] are documented as environment fields and
/// never hashed; any other field is dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    pub(crate) fields: Vec<(String, ValueSpec)>,
    pub(crate) env: Vec<String>,
}

impl Spec {
    /// An empty whitelist.
    pub fn new() -> Self {
        Spec::default()
    }

    /// Whitelists `name`, canonicalized by `value`.
    #[must_use]
    pub fn field(mut self, name: impl Into<String>, value: ValueSpec) -> Self {
        self.fields.push((name.into(), value));
        self
    }

    /// Declares `name` an environment field: it varies per attempt and is never hashed.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }

    /// The whitelisted fields and their specs, in the order they were added.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &ValueSpec)> {
        self.fields.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// The environment fields.
    pub fn env_fields(&self) -> impl Iterator<Item = &str> {
        self.env.iter().map(String::as_str)
    }
}

/// A value that has no canonical form under its spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonicalError {
    /// Not a decimal number.
    #[error(
        "`{text}` is not a decimal number: write digits with an optional `.` and exponent, e.g. `100.00`"
    )]
    InvalidNumber {
        /// The offending text (shortened).
        text: String,
    },
    /// A number whose exact plain form would be absurdly long.
    #[error(
        "number `{text}` is out of range: its exact decimal form would need more than 1100 zeros"
    )]
    NumberOutOfRange {
        /// The offending text (shortened).
        text: String,
    },
}
