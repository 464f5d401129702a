//! What `#[derive(Fingerprint)]` generates for Protocol Buffers messages (prost-generated
//! structs and `prost::Oneof` enums) calls: the proto3 default test of fields without presence
//! ([`ProtoDefault`]), bytes as base64 whatever their buffer type, maps with integer and `bool`
//! keys ([`ProtoMapKey`]), and the members of a oneof written at the message level
//! ([`ProtoOneof`], [`Oneofs`]). None of it depends on prost: the generated code names these
//! items only, so the derive works without the `prost` feature, which adds the well-known types
//! (`prost_types::Timestamp`, `Duration`) in `foreign.rs`.
//!
//! The canonical forms are specified in `docs/fingerprint.md`, "Protocol Buffers messages".
//! Generated code reaches these items through `__private`; they are public only so that it can.

use super::CanonicalWriter;
use crate::json::Spec;

/// A proto3 scalar field without presence, omitted from the canonical object at its default
/// value (`0`, `false`, `""`): a client that sends the default and one that leaves the field out
/// sent the same message (the wire cannot tell them apart).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a protobuf scalar",
    label = "a field without `optional` must be a protobuf scalar (integer, `bool`, `f32`/`f64`, `String`)",
    note = "check the field's `#[prost(..)]` attribute: messages are `Option<T>` with `message, optional`, lists `repeated`, maps `map = \"..\"`"
)]
pub trait ProtoDefault {
    /// `true` at the proto3 default value.
    fn is_proto_default(&self) -> bool;
}

macro_rules! zero_default {
    ($($t:ty)*) => {$(
        impl ProtoDefault for $t {
            #[inline]
            fn is_proto_default(&self) -> bool {
                *self == 0
            }
        }
    )*};
}
zero_default!(i32 i64 u32 u64);

impl ProtoDefault for f32 {
    /// `0.0` and `-0.0` (prost does not send either).
    #[inline]
    fn is_proto_default(&self) -> bool {
        *self == 0.0
    }
}

impl ProtoDefault for f64 {
    /// `0.0` and `-0.0` (prost does not send either).
    #[inline]
    fn is_proto_default(&self) -> bool {
        *self == 0.0
    }
}

impl ProtoDefault for bool {
    #[inline]
    fn is_proto_default(&self) -> bool {
        !*self
    }
}

impl ProtoDefault for String {
    #[inline]
    fn is_proto_default(&self) -> bool {
        self.is_empty()
    }
}

impl<T: ProtoDefault + ?Sized> ProtoDefault for &T {
    #[inline]
    fn is_proto_default(&self) -> bool {
        (**self).is_proto_default()
    }
}

/// A `bytes` field (`Vec<u8>`, `bytes::Bytes`, ...) as a padded standard base64 string.
#[inline]
pub fn proto_bytes<B: AsRef<[u8]> + ?Sized>(bytes: &B, w: &mut CanonicalWriter<'_>) {
    w.base64(bytes.as_ref());
}

/// Whether a `bytes` field holds its proto3 default, no bytes.
#[inline]
pub fn proto_bytes_is_empty<B: AsRef<[u8]> + ?Sized>(bytes: &B) -> bool {
    bytes.as_ref().is_empty()
}

/// A `repeated bytes` field: an array of base64 strings.
pub fn proto_repeated_bytes<B: AsRef<[u8]>>(items: &[B], w: &mut CanonicalWriter<'_>) {
    w.raw(b"[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            w.raw(b",");
        }
        w.base64(item.as_ref());
    }
    w.raw(b"]");
}

/// The key of a protobuf map: a string, an integer or a `bool`, written as the member name the
/// proto JSON mapping gives it (`7` -> `"7"`, `true` -> `"true"`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a protobuf map key",
    note = "protobuf map keys are strings, integers and `bool`"
)]
pub trait ProtoMapKey {
    /// Appends the key's member name to `out`.
    fn push_key(&self, out: &mut String);
}

impl ProtoMapKey for String {
    fn push_key(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl ProtoMapKey for bool {
    fn push_key(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

macro_rules! integer_keys {
    ($($t:ty)*) => {$(
        impl ProtoMapKey for $t {
            fn push_key(&self, out: &mut String) {
                out.push_str(itoa::Buffer::new().format(*self));
            }
        }
    )*};
}
integer_keys!(i32 i64 u32 u64);

/// Whether a map field has no entries (its proto3 default).
#[inline]
pub fn proto_map_is_empty<'m, M: ?Sized, K: 'm, V: 'm>(map: &'m M) -> bool
where
    &'m M: IntoIterator<Item = (&'m K, &'m V)>,
{
    map.into_iter().next().is_none()
}

/// A map field (`HashMap` or `BTreeMap`) as an object: members sorted by the bytes of their
/// names, whatever the key type's order (`"10" < "9"`), each value written by `write_value`.
/// Entries are kept whatever their values: a map entry is always present.
pub fn proto_map<'m, M: ?Sized, K: ProtoMapKey + 'm, V: 'm>(
    w: &mut CanonicalWriter<'_>,
    map: &'m M,
    write_value: impl Fn(&'m V, &mut CanonicalWriter<'_>),
) where
    &'m M: IntoIterator<Item = (&'m K, &'m V)>,
{
    let mut names = String::new();
    let mut entries: Vec<(usize, usize, &V)> = Vec::new();
    for (key, value) in map {
        let start = names.len();
        key.push_key(&mut names);
        entries.push((start, names.len(), value));
    }
    entries.sort_unstable_by(|a, b| names.as_bytes()[a.0..a.1].cmp(&names.as_bytes()[b.0..b.1]));
    let mut first = true;
    w.begin_object();
    for (start, end, value) in entries {
        w.member(&mut first, &names[start..end]);
        write_value(value, w);
    }
    w.end_object();
}

/// A `prost::Oneof` enum deriving `Fingerprint`: the set variant is written as a member of the
/// enclosing message, named after the variant's field (the proto JSON mapping's shape).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a oneof that derives `Fingerprint`",
    label = "the field's `#[prost(oneof = \"..\")]` enum must derive `idem::Fingerprint` too",
    note = "add `#[derive(idem::Fingerprint)]` to the oneof enum (with prost-build: `.type_attribute(\"package.Message.oneof_name\", \"#[derive(idem::Fingerprint)]\")`)"
)]
pub trait ProtoOneof {
    /// The member name of the set variant (its proto field name).
    fn proto_member(&self) -> &'static str;
    /// Writes the set variant's value.
    fn write_proto_value(&self, w: &mut CanonicalWriter<'_>);
    /// `spec` with one member per variant, for the run-time spec of the enclosing message.
    fn add_proto_members(spec: Spec) -> Spec
    where
        Self: Sized;
}

/// The type of a oneof field: `Option<E>` with `E: ProtoOneof`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a oneof field",
    label = "a `#[prost(oneof = \"..\")]` field must be an `Option` of its oneof enum"
)]
pub trait ProtoOneofField {
    /// The set variant, if any.
    fn proto_oneof(&self) -> Option<&dyn ProtoOneof>;
    /// `spec` with one member per variant of the oneof.
    fn add_proto_members(spec: Spec) -> Spec;
}

impl<E: ProtoOneof> ProtoOneofField for Option<E> {
    #[inline]
    fn proto_oneof(&self) -> Option<&dyn ProtoOneof> {
        self.as_ref().map(|e| e as &dyn ProtoOneof)
    }
    fn add_proto_members(spec: Spec) -> Spec {
        E::add_proto_members(spec)
    }
}

/// The set oneofs of a message, in the byte order of their member names, merged into the
/// message's object between the members whose names are known at compile time.
pub struct Oneofs<'a, const N: usize> {
    set: [Option<&'a dyn ProtoOneof>; N],
    next: usize,
}

impl<'a, const N: usize> Oneofs<'a, N> {
    /// Sorts the set oneofs (unset ones last).
    #[inline]
    pub fn new(mut set: [Option<&'a dyn ProtoOneof>; N]) -> Self {
        set.sort_unstable_by(|a, b| match (a, b) {
            (Some(a), Some(b)) => a.proto_member().as_bytes().cmp(b.proto_member().as_bytes()),
            (Some(_), None) => core::cmp::Ordering::Less,
            (None, Some(_)) => core::cmp::Ordering::Greater,
            (None, None) => core::cmp::Ordering::Equal,
        });
        Oneofs { set, next: 0 }
    }

    /// Writes the oneof members whose names sort before `name` (all remaining ones with `None`).
    #[inline]
    pub fn write_before(
        &mut self,
        w: &mut CanonicalWriter<'_>,
        first: &mut bool,
        name: Option<&str>,
    ) {
        while let Some(Some(oneof)) = self.set.get(self.next) {
            let member = oneof.proto_member();
            if name.is_some_and(|name| member.as_bytes() >= name.as_bytes()) {
                break;
            }
            // The object is opened by its first member (`close_object` ends it).
            if *first {
                w.begin_object();
            }
            w.member(first, member);
            oneof.write_proto_value(w);
            self.next += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::fingerprint::Canonical;

    fn text(write: impl FnOnce(&mut CanonicalWriter<'_>)) -> String {
        let mut out = Vec::new();
        write(&mut CanonicalWriter::new(&mut out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn map_keys_sort_by_their_text() {
        let map: HashMap<i64, String> = [(10, "a".into()), (9, "b".into()), (-1, "c".into())]
            .into_iter()
            .collect();
        assert_eq!(
            text(|w| proto_map(w, &map, |v, w| v.write_canonical(w))),
            r#"{"-1":"c","10":"a","9":"b"}"#
        );
        let map: BTreeMap<bool, Vec<u8>> = [(true, b"hi".to_vec()), (false, Vec::new())]
            .into_iter()
            .collect();
        assert_eq!(
            text(|w| proto_map(w, &map, proto_bytes)),
            r#"{"false":"","true":"aGk="}"#
        );
        assert!(proto_map_is_empty(&HashMap::<String, i32>::new()));
        assert!(!proto_map_is_empty(&map));
    }

    #[test]
    fn defaults() {
        assert!(0_i32.is_proto_default() && (-0.0_f64).is_proto_default());
        assert!(!1_u64.is_proto_default() && !f32::NAN.is_proto_default());
        assert!(String::new().is_proto_default() && !"x".to_owned().is_proto_default());
        assert!(!true.is_proto_default() && false.is_proto_default());
        assert_eq!(
            text(|w| proto_repeated_bytes(&[b"a".to_vec(), Vec::new()], w)),
            r#"["YQ==",""]"#
        );
    }
}
