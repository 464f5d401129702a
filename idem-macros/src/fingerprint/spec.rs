//! The run-time spec of a derived type (`Canonical::value_spec`): the whitelist under which the
//! run-time canonicalizer turns `serde_json::to_value(&v)` into the derive's exact bytes.

use proc_macro2::TokenStream;
use quote::quote;

use super::ast::{Field, Kind, Style, Variant, Writer, sorted_hashed};
use super::paths::{Paths, qualified};
use super::proto_expand::{self, is_oneof, proto_of};

/// The spec of one field's value, by how it is written.
pub(super) fn field_spec(p: &Paths, field: &Field<'_>) -> TokenStream {
    let pv = &p.private;
    if let Some(spec) = proto_of(field).and_then(|proto| proto_expand::spec(p, field, proto)) {
        return spec;
    }
    match field.writer() {
        Writer::Canonical => {
            let f = qualified(p, field, "Canonical", "value_spec");
            quote!(#f())
        }
        Writer::Float => {
            let f = qualified(p, field, "FloatField", "value_spec");
            quote!(#f())
        }
        Writer::Base64 => {
            let f = qualified(p, field, "Base64Field", "value_spec");
            quote!(#f())
        }
        Writer::With(_) => quote!(#pv::ValueSpec::Any),
    }
}

/// `.field(..)`/`.env(..)` whitelist of an object.
pub(super) fn object_spec(p: &Paths, fields: &[Field<'_>]) -> TokenStream {
    let pv = &p.private;
    let hashed = sorted_hashed(fields);
    // A oneof's members are the variants' names, not the field's.
    let oneofs = hashed.iter().filter(|f| is_oneof(f)).map(|field| {
        let ty = field.ty;
        quote!(let __idem_spec = <#ty as #pv::ProtoOneofField>::add_proto_members(__idem_spec);)
    });
    let hashed = hashed.iter().filter(|f| !is_oneof(f)).map(|field| {
        let name = &field.wire;
        let spec = field_spec(p, field);
        quote!(.field(#name, #spec))
    });
    let env = fields.iter().filter(|f| f.kind() == Kind::Env).map(|f| {
        let name = &f.wire;
        quote!(.env(#name))
    });
    quote!({
        let __idem_spec = #pv::Spec::new() #(#hashed)* #(#env)*;
        #(#oneofs)*
        #pv::ValueSpec::Object(__idem_spec)
    })
}

/// One spec per element (`ValueSpec::Tuple`); when `skip_serializing_if` makes positions vary,
/// one spec for all elements, `Any` if they differ.
pub(super) fn array_spec(p: &Paths, fields: &[Field<'_>]) -> TokenStream {
    let pv = &p.private;
    let elements: Vec<_> = fields.iter().filter(|f| f.kind() == Kind::Hashed).collect();
    let specs = elements.iter().map(|f| field_spec(p, f));
    if elements
        .iter()
        .any(|f| f.attrs.skip_serializing_if.is_some())
    {
        quote!(#pv::uniform_array_spec([#(#specs),*]))
    } else {
        quote!(#pv::tuple_spec([#(#specs),*]))
    }
}

/// `ValueSpec::Enum`, one `VariantSpec` per variant (`None` payload for unit variants).
pub(super) fn enum_spec(p: &Paths, variants: &[Variant<'_>]) -> TokenStream {
    let pv = &p.private;
    let variants = variants.iter().map(|variant| {
        let name = &variant.wire;
        let payload = match variant.style {
            Style::Unit => None,
            Style::Newtype if variant.fields[0].kind() == Kind::Skipped => None,
            Style::Newtype => Some(field_spec(p, &variant.fields[0])),
            Style::Tuple => Some(array_spec(p, &variant.fields)),
            Style::Struct => Some(object_spec(p, &variant.fields)),
        };
        match payload {
            Some(spec) => quote!((#name, #pv::Some(#spec))),
            None => quote!((#name, #pv::None)),
        }
    });
    quote!(#pv::enum_spec([#(#variants),*]))
}
