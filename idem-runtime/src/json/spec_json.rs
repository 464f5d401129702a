//! [`Spec`] ⇄ JSON (`docs/fingerprint.md`, "Spec format"):
//!
//! ```text
//! spec       = { name: descriptor | "env" | {"alias": name}
//!                     | {"member": {"spec": descriptor, "default": text, "unread": true,
//!                                 "omit_empty": true}}, ... }
//!              (in "member", all but "spec" are optional)
//! descriptor = "any" | "decimal" | "base64" | "timestamp" | "date" | "uuid"
//!            | {"array": descriptor} | {"tuple": [descriptor, ...]} | {"set": descriptor}
//!            | {"map": descriptor}
//!            | {"object": spec} | {"enum": {variant: descriptor | null, ...}}
//! ```

use core::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::spec::{Spec, ValueSpec, VariantSpec};
use crate::encode::CanonicalError;

const KINDS: &[&str] = &[
    "any",
    "decimal",
    "base64",
    "timestamp",
    "date",
    "uuid",
    "env",
];
const WRAPPERS: &[&str] = &[
    "array", "tuple", "set", "map", "object", "enum", "alias", "member",
];

impl Spec {
    /// Reads a spec written as JSON: an object mapping member names to `"env"` or a descriptor
    /// (`"any"`, `"decimal"`, `"base64"`, `"timestamp"`, `"date"`, `"uuid"`, `{"array": D}`,
    /// `{"tuple": [D, ...]}`, `{"set": D}`, `{"map": D}`, `{"object": SPEC}`,
    /// `{"enum": {"Variant": D or null}}`).
    /// A name listed twice is an error.
    ///
    /// ```
    /// use idem_runtime::{Spec, ValueSpec};
    /// let spec = Spec::from_json_str(r#"{
    ///     "amount": "decimal",
    ///     "lines": {"array": {"object": {"sku": "any", "qty": "decimal"}}},
    ///     "client_ip": "env"
    /// }"#).unwrap();
    /// assert_eq!(spec, Spec::new()
    ///     .field("amount", ValueSpec::Decimal)
    ///     .field("lines", ValueSpec::array(ValueSpec::object(
    ///         Spec::new().field("sku", ValueSpec::Any).field("qty", ValueSpec::Decimal),
    ///     )))
    ///     .env("client_ip"));
    /// assert_eq!(Spec::from_json_str(r#"{"a": "decimals"}"#).unwrap_err().kind(), "invalid_spec");
    /// ```
    pub fn from_json_str(json: &str) -> Result<Spec, CanonicalError> {
        serde_json::from_str(json).map_err(|e| CanonicalError::InvalidSpec {
            message: e.to_string(),
        })
    }

    /// Writes the spec as JSON (the format [`Spec::from_json_str`] reads): whitelisted fields
    /// first, in order, then environment fields. A field listed twice appears once (the last
    /// listing); a name that is also an environment field appears as `"env"` only.
    ///
    /// ```
    /// use idem_runtime::{Spec, ValueSpec};
    /// let spec = Spec::new().field("tags", ValueSpec::set(ValueSpec::Any)).env("ts");
    /// assert_eq!(spec.to_json_string(), r#"{"tags":{"set":"any"},"ts":"env"}"#);
    /// assert_eq!(Spec::from_json_str(&spec.to_json_string()).unwrap(), spec);
    /// ```
    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The fields as they take effect: the last listing of each name, env names excluded.
    fn effective_fields(&self) -> impl Iterator<Item = &(String, ValueSpec)> {
        self.fields.iter().enumerate().filter_map(|(i, field)| {
            let later = self.fields[i + 1..].iter().any(|(n, _)| *n == field.0);
            let env = self.env.contains(&field.0);
            (!later && !env).then_some(field)
        })
    }
}

impl Serialize for Spec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, spec) in self.effective_fields() {
            let default = self.defaults.iter().rev().find(|(n, _)| n == name);
            let unread = self.unread.contains(name);
            let omit_empty = self.omit_empty.contains(name);
            if default.is_some() || unread || omit_empty {
                let member = MemberJson {
                    spec,
                    default: default.map(|(_, text)| text.as_str()),
                    unread,
                    omit_empty,
                };
                map.serialize_entry(name, &member)?;
            } else {
                map.serialize_entry(name, spec)?;
            }
        }
        for (i, (input, field)) in self.aliases.iter().enumerate() {
            if !self.aliases[i + 1..]
                .iter()
                .any(|(later, _)| later == input)
            {
                map.serialize_entry(input, &Alias(field))?;
            }
        }
        for (i, name) in self.env.iter().enumerate() {
            if !self.env[..i].contains(name) {
                map.serialize_entry(name, "env")?;
            }
        }
        map.end()
    }
}

impl Serialize for ValueSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ValueSpec::Any => serializer.serialize_str("any"),
            ValueSpec::Decimal => serializer.serialize_str("decimal"),
            ValueSpec::Base64 => serializer.serialize_str("base64"),
            ValueSpec::Timestamp => serializer.serialize_str("timestamp"),
            ValueSpec::Date => serializer.serialize_str("date"),
            ValueSpec::Uuid => serializer.serialize_str("uuid"),
            ValueSpec::Array(inner) => single(serializer, "array", inner),
            ValueSpec::Tuple(elements) => single(serializer, "tuple", elements),
            ValueSpec::Set(inner) => single(serializer, "set", inner),
            ValueSpec::Map(inner) => single(serializer, "map", inner),
            ValueSpec::Object(spec) => single(serializer, "object", spec),
            ValueSpec::Enum(variants) => single(serializer, "enum", &Variants(variants)),
        }
    }
}

/// `{"alias": field}`.
struct Alias<'a>(&'a str);

impl Serialize for Alias<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        single(serializer, "alias", self.0)
    }
}

/// `{"member": {"spec": descriptor, "default": text, "unread": true}}`.
struct MemberJson<'a> {
    spec: &'a ValueSpec,
    default: Option<&'a str>,
    unread: bool,
    omit_empty: bool,
}

impl Serialize for MemberJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Inner<'b>(&'b MemberJson<'b>);
        impl Serialize for Inner<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("spec", self.0.spec)?;
                if let Some(text) = self.0.default {
                    map.serialize_entry("default", text)?;
                }
                if self.0.unread {
                    map.serialize_entry("unread", &true)?;
                }
                if self.0.omit_empty {
                    map.serialize_entry("omit_empty", &true)?;
                }
                map.end()
            }
        }
        single(serializer, "member", &Inner(self))
    }
}

fn single<S: Serializer, T: Serialize + ?Sized>(
    serializer: S,
    key: &str,
    value: &T,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(1))?;
    map.serialize_entry(key, value)?;
    map.end()
}

struct Variants<'a>(&'a [VariantSpec]);

impl Serialize for Variants<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for v in self.0 {
            map.serialize_entry(&v.name, &v.payload)?;
        }
        map.end()
    }
}

/// A member descriptor: `"env"` or a [`ValueSpec`].
enum Descriptor {
    Env,
    Value(ValueSpec),
    /// Another input name of a field.
    Alias(String),
    /// A field with the canonical text it takes when absent, or not read under its name.
    Member(MemberDe),
}

/// The inside of `{"member": {"spec": .., "default": .., "unread": ..}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberDe {
    spec: ValueSpec,
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    unread: bool,
    #[serde(default)]
    omit_empty: bool,
}

impl<'de> Deserialize<'de> for Spec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecVisitor;
        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = Spec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a spec: an object mapping member names to descriptors")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Spec, A::Error> {
                let mut spec = Spec::new();
                let mut seen: Vec<String> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if seen.contains(&name) {
                        return Err(de::Error::custom(format_args!(
                            "member `{name}` is listed twice"
                        )));
                    }
                    match map.next_value::<Descriptor>()? {
                        Descriptor::Env => spec.env.push(name.clone()),
                        Descriptor::Value(v) => spec.fields.push((name.clone(), v)),
                        Descriptor::Alias(field) => spec.aliases.push((name.clone(), field)),
                        Descriptor::Member(m) => {
                            spec.fields.push((name.clone(), m.spec));
                            if let Some(text) = m.default {
                                spec.defaults.push((name.clone(), text));
                            }
                            if m.unread {
                                spec.unread.push(name.clone());
                            }
                            if m.omit_empty {
                                spec.omit_empty.push(name.clone());
                            }
                        }
                    }
                    seen.push(name);
                }
                Ok(spec)
            }
        }
        deserializer.deserialize_map(SpecVisitor)
    }
}

impl<'de> Deserialize<'de> for Descriptor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DescriptorVisitor { member: true })
    }
}

impl<'de> Deserialize<'de> for ValueSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match deserializer.deserialize_any(DescriptorVisitor { member: false })? {
            Descriptor::Value(v) => Ok(v),
            Descriptor::Env | Descriptor::Alias(_) | Descriptor::Member(_) => {
                Err(de::Error::custom(ENV_NESTED))
            }
        }
    }
}

const ENV_NESTED: &str = "`env`, `alias` and `member` describe an object member, not a value: list it in the object's spec";

struct DescriptorVisitor {
    /// Whether `"env"` is allowed (object members only).
    member: bool,
}

impl<'de> Visitor<'de> for DescriptorVisitor {
    type Value = Descriptor;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a descriptor: one of \"any\", \"decimal\", \"base64\", \"timestamp\", \"date\", \"uuid\", \"env\", or an object with one key `array`, `tuple`, `set`, `map`, `object` or `enum`",
        )
    }

    fn visit_str<E: de::Error>(self, kind: &str) -> Result<Descriptor, E> {
        Ok(Descriptor::Value(match kind {
            "any" => ValueSpec::Any,
            "decimal" => ValueSpec::Decimal,
            "base64" => ValueSpec::Base64,
            "timestamp" => ValueSpec::Timestamp,
            "date" => ValueSpec::Date,
            "uuid" => ValueSpec::Uuid,
            "env" if self.member => return Ok(Descriptor::Env),
            "env" => return Err(E::custom(ENV_NESTED)),
            other => return Err(E::unknown_variant(other, KINDS)),
        }))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Descriptor, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::custom(
                "an empty object is not a descriptor: write e.g. {\"array\": \"any\"}",
            ));
        };
        let spec = match key.as_str() {
            "array" => ValueSpec::Array(Box::new(map.next_value()?)),
            "tuple" => ValueSpec::Tuple(map.next_value()?),
            "set" => ValueSpec::Set(Box::new(map.next_value()?)),
            "map" => ValueSpec::Map(Box::new(map.next_value()?)),
            "object" => ValueSpec::Object(map.next_value()?),
            "enum" => ValueSpec::Enum(map.next_value::<VariantList>()?.0),
            "alias" | "member" if !self.member => return Err(de::Error::custom(ENV_NESTED)),
            "alias" => {
                let field = map.next_value::<String>()?;
                return one_key(map, &key).map(|()| Descriptor::Alias(field));
            }
            "member" => {
                let m = map.next_value::<MemberDe>()?;
                return one_key(map, &key).map(|()| Descriptor::Member(m));
            }
            other => return Err(de::Error::unknown_field(other, WRAPPERS)),
        };
        one_key(map, &key)?;
        Ok(Descriptor::Value(spec))
    }
}

/// Errs when the descriptor object `map`, whose key `key` was read, has another.
fn one_key<'de, A: MapAccess<'de>>(mut map: A, key: &str) -> Result<(), A::Error> {
    if map.next_key::<de::IgnoredAny>()?.is_some() {
        return Err(de::Error::custom(format_args!(
            "a descriptor object has exactly one key; `{key}` came with others"
        )));
    }
    Ok(())
}

struct VariantList(Vec<VariantSpec>);

impl<'de> Deserialize<'de> for VariantList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = VariantList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object mapping variant names to a descriptor or null")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<VariantList, A::Error> {
                let mut out: Vec<VariantSpec> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if out.iter().any(|v| v.name == name) {
                        return Err(de::Error::custom(format_args!(
                            "variant `{name}` is listed twice"
                        )));
                    }
                    let payload = map.next_value::<Option<ValueSpec>>()?;
                    out.push(VariantSpec { name, payload });
                }
                Ok(VariantList(out))
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_and_defaults_round_trip() {
        let spec = Spec::new()
            .field("amount", ValueSpec::Decimal)
            .field("currency", ValueSpec::Any)
            .field("region", ValueSpec::Any)
            .alias("amt", "amount")
            .default_value("currency", r#""EUR""#)
            .field("tags", ValueSpec::Any)
            .default_value("region", r#""eu""#)
            .unread("region")
            .omit_empty("tags");
        let json = spec.to_json_string();
        assert_eq!(
            json,
            r#"{"amount":"decimal","currency":{"member":{"spec":"any","default":"\"EUR\""}},"region":{"member":{"spec":"any","default":"\"eu\"","unread":true}},"tags":{"member":{"spec":"any","omit_empty":true}},"amt":{"alias":"amount"}}"#
        );
        assert_eq!(Spec::from_json_str(&json).unwrap(), spec);
        let nested = r#"{"a":{"array":{"alias":"b"}}}"#;
        assert!(Spec::from_json_str(nested).is_err());
    }

    #[test]
    fn every_descriptor_round_trips() {
        let spec = Spec::new()
            .field("a", ValueSpec::Any)
            .field("d", ValueSpec::Decimal)
            .field("b", ValueSpec::Base64)
            .field("t", ValueSpec::Timestamp)
            .field("day", ValueSpec::Date)
            .field("u", ValueSpec::Uuid)
            .field("arr", ValueSpec::array(ValueSpec::Decimal))
            .field(
                "tup",
                ValueSpec::Tuple(vec![ValueSpec::Decimal, ValueSpec::Any]),
            )
            .field("set", ValueSpec::set(ValueSpec::Uuid))
            .field("map", ValueSpec::map(ValueSpec::Any))
            .field(
                "obj",
                ValueSpec::object(Spec::new().field("x", ValueSpec::Any).env("ip")),
            )
            .field(
                "e",
                ValueSpec::enumeration([("Unit", None), ("Amount", Some(ValueSpec::Decimal))]),
            )
            .env("ts");
        let json = spec.to_json_string();
        assert_eq!(
            json,
            r#"{"a":"any","d":"decimal","b":"base64","t":"timestamp","day":"date","u":"uuid","arr":{"array":"decimal"},"tup":{"tuple":["decimal","any"]},"set":{"set":"uuid"},"map":{"map":"any"},"obj":{"object":{"x":"any","ip":"env"}},"e":{"enum":{"Unit":null,"Amount":"decimal"}},"ts":"env"}"#
        );
        assert_eq!(Spec::from_json_str(&json).unwrap(), spec);
    }

    #[test]
    fn rejects_malformed_specs() {
        for (bad, hint) in [
            (r#"{"a":"decimals"}"#, "unknown variant `decimals`"),
            (r#"{"a":{"array":"env"}}"#, "describe an object member"),
            (r#"{"a":{"list":"any"}}"#, "unknown field `list`"),
            (r#"{"a":{"array":"any","set":"any"}}"#, "exactly one key"),
            (r#"{"a":{}}"#, "empty object"),
            (r#"{"a":"any","a":"env"}"#, "listed twice"),
            (r#"{"a":{"enum":{"X":null,"X":"any"}}}"#, "listed twice"),
            (r#"["a"]"#, "a spec"),
            (r#"{"a":1}"#, "a descriptor"),
        ] {
            let err = Spec::from_json_str(bad).unwrap_err();
            assert_eq!(err.kind(), "invalid_spec");
            assert!(err.to_string().contains(hint), "{bad}: {err}");
        }
    }

    #[test]
    fn serializes_the_effective_spec() {
        let spec = Spec::new()
            .field("a", ValueSpec::Any)
            .field("a", ValueSpec::Decimal)
            .field("ip", ValueSpec::Any)
            .env("ip")
            .env("ip");
        assert_eq!(spec.to_json_string(), r#"{"a":"decimal","ip":"env"}"#);
    }
}
