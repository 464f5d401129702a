//! [`Spec`], [`ValueSpec`], [`VariantSpec`]: what the run-time canonicalizer keeps and how.

/// How a JSON value is canonicalized.
///
/// Every kind also accepts `null` (an `Option::None`): it is omitted as an object member and stays
/// `null` inside arrays.
///
/// ```
/// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
/// let spec = Spec::new()
///     .field("amount", ValueSpec::Decimal)
///     .field("tags", ValueSpec::set(ValueSpec::Any));
/// let text = canonicalize_slice(br#"{"tags":["b","a"],"amount":"100.00"}"#, &spec).unwrap();
/// assert_eq!(text, r#"{"amount":100,"tags":["a","b"]}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueSpec {
    /// By the general rules only: objects sorted with every member kept (nulls omitted), numbers
    /// exact decimals, strings as they are.
    Any,
    /// A number or a decimal string (`"100.00"`, rust_decimal's serde form), written as a
    /// canonical number (`100`).
    Decimal,
    /// Bytes: a base64 string (standard alphabet, padding optional) or an array of integers
    /// 0..=255 (serde's form of `Vec<u8>`), written as padded standard base64.
    Base64,
    /// An RFC 3339 date-time, written in UTC as `YYYY-MM-DDTHH:MM:SS[.fraction]Z` with no
    /// trailing fractional zeros.
    Timestamp,
    /// A calendar date `YYYY-MM-DD`, written as it is.
    Date,
    /// A UUID string (any case; hyphenated, simple, braced or URN), written lowercase and
    /// hyphenated.
    Uuid,
    /// An array whose elements follow the inner spec, in order.
    Array(Box<ValueSpec>),
    /// An array of exactly as many elements as specs, each following its own spec (serde's form
    /// of a tuple or tuple struct).
    Tuple(Vec<ValueSpec>),
    /// An array whose elements follow the inner spec, sorted by the bytes of their canonical
    /// text, duplicates removed.
    Set(Box<ValueSpec>),
    /// An object with arbitrary member names whose values follow the inner spec.
    Map(Box<ValueSpec>),
    /// An object with a whitelist of fields.
    Object(Spec),
    /// An externally tagged enum (serde's default): `"Variant"` or `{"Variant": payload}`.
    Enum(Vec<VariantSpec>),
}

impl ValueSpec {
    /// [`ValueSpec::Array`] of `inner`.
    ///
    /// ```
    /// use idem_runtime::ValueSpec;
    /// assert_eq!(ValueSpec::array(ValueSpec::Any), ValueSpec::Array(Box::new(ValueSpec::Any)));
    /// ```
    pub fn array(inner: ValueSpec) -> Self {
        ValueSpec::Array(Box::new(inner))
    }

    /// [`ValueSpec::Set`] of `inner`.
    ///
    /// ```
    /// use idem_runtime::ValueSpec;
    /// assert_eq!(ValueSpec::set(ValueSpec::Uuid), ValueSpec::Set(Box::new(ValueSpec::Uuid)));
    /// ```
    pub fn set(inner: ValueSpec) -> Self {
        ValueSpec::Set(Box::new(inner))
    }

    /// [`ValueSpec::Map`] of `inner`.
    ///
    /// ```
    /// use idem_runtime::ValueSpec;
    /// assert_eq!(ValueSpec::map(ValueSpec::Decimal), ValueSpec::Map(Box::new(ValueSpec::Decimal)));
    /// ```
    pub fn map(inner: ValueSpec) -> Self {
        ValueSpec::Map(Box::new(inner))
    }

    /// [`ValueSpec::Object`] of `spec`.
    ///
    /// ```
    /// use idem_runtime::{Spec, ValueSpec};
    /// let line = ValueSpec::object(Spec::new().field("sku", ValueSpec::Any));
    /// assert!(matches!(line, ValueSpec::Object(_)));
    /// ```
    pub fn object(spec: Spec) -> Self {
        ValueSpec::Object(spec)
    }

    /// [`ValueSpec::Enum`] of `(name, payload)` variants; `None` marks a unit variant.
    ///
    /// ```
    /// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
    /// let kind = ValueSpec::enumeration([
    ///     ("Card", Some(ValueSpec::object(Spec::new().field("last4", ValueSpec::Any)))),
    ///     ("Cash", None),
    /// ]);
    /// let spec = Spec::new().field("method", kind);
    /// let text = canonicalize_slice(br#"{"method":{"Card":{"last4":"4242"}}}"#, &spec).unwrap();
    /// assert_eq!(text, r#"{"method":{"Card":{"last4":"4242"}}}"#);
    /// ```
    pub fn enumeration<N: Into<String>>(
        variants: impl IntoIterator<Item = (N, Option<ValueSpec>)>,
    ) -> Self {
        ValueSpec::Enum(
            variants
                .into_iter()
                .map(|(name, payload)| VariantSpec {
                    name: name.into(),
                    payload,
                })
                .collect(),
        )
    }
}

/// One variant of a [`ValueSpec::Enum`].
///
/// ```
/// use idem_runtime::json::{ValueSpec, VariantSpec};
/// let unit = VariantSpec { name: "Cash".into(), payload: None };
/// assert_eq!(ValueSpec::Enum(vec![unit.clone()]), ValueSpec::enumeration([("Cash", None)]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantSpec {
    /// The variant's wire name.
    pub name: String,
    /// The payload's spec; `None` for a unit variant.
    pub payload: Option<ValueSpec>,
}

/// A whitelist of object fields: only the fields listed with [`Spec::field`] are part of the
/// canonical form; fields listed with [`Spec::env`] are documented as environment fields and
/// never hashed; any other field is dropped (or rejected, with
/// [`Canonicalizer::deny_unknown_fields`](super::Canonicalizer::deny_unknown_fields)).
///
/// It can also be written as JSON (`docs/fingerprint.md`, "Spec format"), see
/// [`Spec::from_json_str`].
///
/// ```
/// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
/// let spec = Spec::new()
///     .field("amount", ValueSpec::Decimal)
///     .field("currency", ValueSpec::Any)
///     .env("client_ip");
/// let body = br#"{"amount":100.00,"currency":"EUR","client_ip":"1.2.3.4","note":null}"#;
/// assert_eq!(canonicalize_slice(body, &spec).unwrap(), r#"{"amount":100,"currency":"EUR"}"#);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    pub(crate) fields: Vec<(String, ValueSpec)>,
    pub(crate) env: Vec<String>,
    /// Other input names of fields: `(input, field)`.
    pub(crate) aliases: Vec<(String, String)>,
    /// The canonical text of fields absent from the input: `(field, text)`.
    pub(crate) defaults: Vec<(String, String)>,
    /// Fields not read under their own names.
    pub(crate) unread: Vec<String>,
    /// Fields left out when empty.
    pub(crate) omit_empty: Vec<String>,
}

/// What a [`Spec`] says about one member name.
pub(crate) enum Member<'s> {
    /// A whitelisted field, written under the field's name (the member's own, or the one it
    /// is an alias of).
    Field(&'s str, &'s ValueSpec),
    Env,
    Unknown,
}

impl Spec {
    /// An empty whitelist.
    ///
    /// ```
    /// use idem_runtime::Spec;
    /// assert_eq!(Spec::new().fields().count(), 0);
    /// ```
    pub fn new() -> Self {
        Spec::default()
    }

    /// Whitelists `name`, canonicalized by `value`. If `name` is listed twice, the last listing
    /// counts.
    ///
    /// ```
    /// use idem_runtime::{Spec, ValueSpec};
    /// let spec = Spec::new().field("amount", ValueSpec::Decimal);
    /// assert_eq!(spec.fields().next(), Some(("amount", &ValueSpec::Decimal)));
    /// ```
    #[must_use]
    pub fn field(mut self, name: impl Into<String>, value: ValueSpec) -> Self {
        self.fields.push((name.into(), value));
        self
    }

    /// Declares `name` an environment field: it varies per attempt and is never hashed, even if
    /// it is also listed with [`Spec::field`].
    ///
    /// ```
    /// use idem_runtime::Spec;
    /// let spec = Spec::new().env("client_ip");
    /// assert_eq!(spec.env_fields().collect::<Vec<_>>(), ["client_ip"]);
    /// ```
    #[must_use]
    pub fn env(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }

    /// Reads member `input` as field `field`: the other names a client may send it under
    /// (serde's `alias`, `rename(deserialize = ..)`, `rename_all(deserialize = ..)`), hashed
    /// under the field's own name, as `#[derive(Fingerprint)]` hashes the deserialized value.
    /// A body with both names is refused (`duplicate_member`), as serde refuses it.
    ///
    /// ```
    /// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
    /// let spec = Spec::new().field("amount", ValueSpec::Decimal).alias("amt", "amount");
    /// assert_eq!(canonicalize_slice(br#"{"amt":5.0}"#, &spec).unwrap(), r#"{"amount":5}"#);
    /// assert!(canonicalize_slice(br#"{"amt":5,"amount":5}"#, &spec).is_err());
    /// ```
    #[must_use]
    pub fn alias(mut self, input: impl Into<String>, field: impl Into<String>) -> Self {
        self.aliases.push((input.into(), field.into()));
        self
    }

    /// The canonical text field `name` takes when the input has no member for it (serde's
    /// `default`: the deserialized value then holds the default, which the derive hashes).
    ///
    /// ```
    /// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
    /// let spec = Spec::new()
    ///     .field("amount", ValueSpec::Any)
    ///     .field("currency", ValueSpec::Any)
    ///     .default_value("currency", r#""EUR""#);
    /// assert_eq!(
    ///     canonicalize_slice(br#"{"amount":1}"#, &spec).unwrap(),
    ///     canonicalize_slice(br#"{"amount":1,"currency":"EUR"}"#, &spec).unwrap(),
    /// );
    /// ```
    #[must_use]
    pub fn default_value(mut self, name: impl Into<String>, canonical: impl Into<String>) -> Self {
        self.defaults.push((name.into(), canonical.into()));
        self
    }

    /// Field `name` is not read from an input member of its own name, which is then unknown
    /// (serde's `skip_deserializing`, or a `rename(deserialize = ..)` to another name: serde
    /// reads the field under its aliases only, or not at all). It is still written, under its
    /// name, from an alias or its default.
    ///
    /// ```
    /// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
    /// // `#[serde(rename(deserialize = "amt"))] amount`: `{"amount":5}` is not read as it.
    /// let spec = Spec::new()
    ///     .field("amount", ValueSpec::Any)
    ///     .alias("amt", "amount")
    ///     .unread("amount");
    /// assert_eq!(canonicalize_slice(br#"{"amount":5}"#, &spec).unwrap(), "{}");
    /// assert_eq!(canonicalize_slice(br#"{"amt":5}"#, &spec).unwrap(), r#"{"amount":5}"#);
    /// ```
    #[must_use]
    pub fn unread(mut self, name: impl Into<String>) -> Self {
        self.unread.push(name.into());
        self
    }

    /// Field `name` is left out when its canonical text is empty (`[]`, `{}`, `""`), as a
    /// derive leaves out a field with `#[serde(skip_serializing_if = "Vec::is_empty")]` (any
    /// `is_empty`): a client's `"tags": []` and no `tags` are then one request, as they are to
    /// the handler.
    ///
    /// ```
    /// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
    /// let spec = Spec::new().field("tags", ValueSpec::Any).omit_empty("tags");
    /// assert_eq!(canonicalize_slice(br#"{"tags":[]}"#, &spec).unwrap(), "{}");
    /// assert_eq!(canonicalize_slice(br#"{"tags":["a"]}"#, &spec).unwrap(), r#"{"tags":["a"]}"#);
    /// ```
    #[must_use]
    pub fn omit_empty(mut self, name: impl Into<String>) -> Self {
        self.omit_empty.push(name.into());
        self
    }

    /// Whether members may be renamed, added or left out ([`Spec::alias`],
    /// [`Spec::default_value`], [`Spec::omit_empty`]): the object is then collected and sorted
    /// before it is written.
    pub(crate) fn reshapes(&self) -> bool {
        !self.aliases.is_empty() || !self.defaults.is_empty() || !self.omit_empty.is_empty()
    }

    /// The whitelisted fields and their specs, in the order they were added.
    ///
    /// ```
    /// use idem_runtime::{Spec, ValueSpec};
    /// let spec = Spec::new().field("b", ValueSpec::Any).field("a", ValueSpec::Uuid);
    /// let names: Vec<_> = spec.fields().map(|(name, _)| name).collect();
    /// assert_eq!(names, ["b", "a"]);
    /// ```
    pub fn fields(&self) -> impl Iterator<Item = (&str, &ValueSpec)> {
        self.fields.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// The environment fields.
    ///
    /// ```
    /// use idem_runtime::Spec;
    /// assert_eq!(Spec::new().env("ts").env_fields().count(), 1);
    /// ```
    pub fn env_fields(&self) -> impl Iterator<Item = &str> {
        self.env.iter().map(String::as_str)
    }

    /// What the spec says about member `name`.
    pub(crate) fn member(&self, name: &str) -> Member<'_> {
        if self.env.iter().any(|e| e == name) {
            return Member::Env;
        }
        let field = match self.aliases.iter().rev().find(|(input, _)| input == name) {
            Some((_, field)) => field.as_str(),
            None if self.unread.iter().any(|u| u == name) => return Member::Unknown,
            None => name,
        };
        match self.fields.iter().rev().find(|(n, _)| n == field) {
            Some((n, spec)) => Member::Field(n, spec),
            None => Member::Unknown,
        }
    }
}
