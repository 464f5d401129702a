//! The `#[prost(..)]` attributes of prost-generated messages and oneofs, read for the shape of
//! each field: with it the derive omits proto3 defaults, writes bytes as base64 and merges oneof
//! members into the message (docs/fingerprint.md, "Protocol Buffers messages"). Malformed prost
//! attributes are left for prost's own derive to report.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::LitStr;

use crate::attr::skip_value;

/// What the `#[prost(..)]` attribute of a field (or of a oneof variant) says.
#[derive(Clone)]
pub(crate) struct Proto {
    pub(crate) kind: ProtoKind,
    pub(crate) label: Label,
    /// The kind's tokens (`string`, `map`, `group`, ..), for errors.
    pub(crate) tokens: TokenStream,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ProtoKind {
    /// A number, `bool` or `string` (also `enumeration`: an `i32`).
    Scalar {
        string: bool,
    },
    Bytes,
    Message,
    /// `map = "k, v"`: whether the values are bytes.
    Map {
        bytes_values: bool,
    },
    Oneof,
    Group,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Label {
    /// No label: implicit presence in proto3 (omitted at its default).
    Plain,
    Optional,
    Repeated,
    Required,
}

const SCALARS: &[&str] = &[
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
    "fixed64", "sfixed32", "sfixed64", "bool",
];

/// The first `#[prost(..)]` attribute in `attrs` that names a kind, if any.
pub(crate) fn from_attrs(attrs: &[syn::Attribute]) -> Option<Proto> {
    let mut found = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("prost")) {
        let mut kind = None;
        let mut label = Label::Plain;
        let _ = attr.parse_nested_meta(|meta| {
            let Some(ident) = meta.path.get_ident() else {
                return skip_value(&meta);
            };
            let name = ident.to_string();
            let tokens = meta.path.to_token_stream();
            match name.as_str() {
                "optional" => label = Label::Optional,
                "repeated" => label = Label::Repeated,
                "required" => label = Label::Required,
                "string" => kind = Some((ProtoKind::Scalar { string: true }, tokens)),
                "bytes" => kind = Some((ProtoKind::Bytes, tokens)),
                "message" => kind = Some((ProtoKind::Message, tokens)),
                "group" => kind = Some((ProtoKind::Group, tokens)),
                "enumeration" => kind = Some((ProtoKind::Scalar { string: false }, tokens)),
                "oneof" => kind = Some((ProtoKind::Oneof, tokens)),
                "map" | "btree_map" | "hash_map" => {
                    let value: LitStr = meta.value()?.parse()?;
                    let text = value.value();
                    let bytes_values = text
                        .split_once(',')
                        .is_some_and(|(_, v)| v.trim().starts_with("bytes"));
                    kind = Some((ProtoKind::Map { bytes_values }, tokens));
                    return Ok(());
                }
                scalar if SCALARS.contains(&scalar) => {
                    kind = Some((ProtoKind::Scalar { string: false }, tokens));
                }
                _ => {}
            }
            skip_value(&meta)
        });
        if let (None, Some((kind, tokens))) = (&found, kind) {
            found = Some(Proto {
                kind,
                label,
                tokens,
            });
        }
    }
    found
}

/// Whether `ty` (the inner type of a message field) is a byte buffer: prost maps the wrapper
/// `google.protobuf.BytesValue` to `Option<Vec<u8>>` (or `Option<Bytes>`).
pub(crate) fn is_byte_buffer(ty: &syn::Type) -> bool {
    let Some(last) = last_segment(ty) else {
        return false;
    };
    if last.ident == "Bytes" {
        return true;
    }
    last.ident == "Vec" && first_type_arg(last).is_some_and(|t| last_ident_is(t, "u8"))
}

/// Whether `ty` is `()` (prost's `google.protobuf.Empty`).
pub(crate) fn is_unit(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Tuple(t) if t.elems.is_empty())
}

/// `T` of `Option<T>` (or of `::core::option::Option<T>`).
pub(crate) fn option_inner(ty: &syn::Type) -> Option<&syn::Type> {
    let last = last_segment(ty)?;
    if last.ident != "Option" {
        return None;
    }
    first_type_arg(last)
}

fn last_segment(ty: &syn::Type) -> Option<&syn::PathSegment> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        syn::Type::Group(g) => last_segment(&g.elem),
        syn::Type::Paren(p) => last_segment(&p.elem),
        _ => None,
    }
}

fn first_type_arg(segment: &syn::PathSegment) -> Option<&syn::Type> {
    match &segment.arguments {
        syn::PathArguments::AngleBracketed(args) => args.args.iter().find_map(|a| match a {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        }),
        _ => None,
    }
}

fn last_ident_is(ty: &syn::Type, name: &str) -> bool {
    last_segment(ty).is_some_and(|s| s.ident == name && s.arguments.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(attr: &str) -> Option<(ProtoKind, Label)> {
        let field: syn::Field =
            syn::parse::Parser::parse_str(syn::Field::parse_named, &format!("{attr} pub x: T"))
                .unwrap();
        from_attrs(&field.attrs).map(|p| (p.kind, p.label))
    }

    #[test]
    fn reads_what_prost_build_emits() {
        use Label::*;
        use ProtoKind::*;
        let cases = [
            (
                r#"#[prost(string, tag = "1")]"#,
                Scalar { string: true },
                Plain,
            ),
            (
                r#"#[prost(int64, optional, tag = "8")]"#,
                Scalar { string: false },
                Optional,
            ),
            (r#"#[prost(bytes = "vec", tag = "3")]"#, Bytes, Plain),
            (
                r#"#[prost(bytes = "bytes", repeated, tag = "3")]"#,
                Bytes,
                Repeated,
            ),
            (
                r#"#[prost(message, optional, boxed, tag = "4")]"#,
                Message,
                Optional,
            ),
            (
                r#"#[prost(enumeration = "Currency", tag = "5")]"#,
                Scalar { string: false },
                Plain,
            ),
            (
                r#"#[prost(int32, repeated, packed = "false", tag = "6")]"#,
                Scalar { string: false },
                Repeated,
            ),
            (
                r#"#[prost(map = "string, bytes", tag = "7")]"#,
                Map { bytes_values: true },
                Plain,
            ),
            (
                r#"#[prost(btree_map = "int64, message", tag = "7")]"#,
                Map {
                    bytes_values: false,
                },
                Plain,
            ),
            (
                r#"#[prost(oneof = "m::Method", tags = "9, 10")]"#,
                Oneof,
                Plain,
            ),
            (r#"#[prost(group, optional, tag = "11")]"#, Group, Optional),
            (
                r#"#[prost(double, required, tag = "12", default = "1.5")]"#,
                Scalar { string: false },
                Required,
            ),
        ];
        for (attr, kind, label) in cases {
            assert_eq!(proto(attr), Some((kind, label)), "{attr}");
        }
        assert_eq!(proto("#[serde(rename = \"x\")]"), None);
    }

    #[test]
    fn types() {
        let ty = |s: &str| syn::parse_str::<syn::Type>(s).unwrap();
        assert!(is_byte_buffer(&ty("::prost::alloc::vec::Vec<u8>")));
        assert!(is_byte_buffer(&ty("::prost::bytes::Bytes")));
        assert!(!is_byte_buffer(&ty("Vec<u16>")));
        assert!(is_unit(&ty("()")));
        assert!(option_inner(&ty("::core::option::Option<Foo>")).is_some());
        assert!(option_inner(&ty("Vec<Foo>")).is_none());
    }
}
