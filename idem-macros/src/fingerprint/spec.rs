//! The run-time spec of a derived type (`Canonical::value_spec`): the whitelist under which the
//! run-time canonicalizer turns `serde_json::to_value(&v)` into the derive's exact bytes.

use proc_macro2::TokenStream;
use quote::quote;

use super::ast::{Field, Kind, Style, Variant, Writer, sorted_hashed};
use super::attr::SerdeDefault;
use super::paths::{Paths, null_check, qualified};
use super::proto_expand::write_value;
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

/// `.field(..)`/`.env(..)` whitelist of an object, read as serde reads the input: every name a
/// field is deserialized from (its deserialize-side name, its aliases) is an `.alias(..)` of the
/// name the derive writes; those of fields not hashed, and of `skip_deserializing` ones, are
/// known and ignored (`.env(..)`); a field absent from the input takes its `default`'s
/// canonical text (`.default_value(..)`), since the deserialized value holds it. `container`
/// is the struct's own `#[serde(default)]`, if any.
pub(super) fn object_spec(
    p: &Paths,
    fields: &[Field<'_>],
    container: Option<&SerdeDefault>,
) -> TokenStream {
    let pv = &p.private;
    let hashed = sorted_hashed(fields);
    // A oneof's members are the variants' names, not the field's.
    let oneofs = hashed.iter().filter(|f| is_oneof(f)).map(|field| {
        let ty = field.ty;
        quote!(let __idem_spec = <#ty as #pv::ProtoOneofField>::add_proto_members(__idem_spec);)
    });
    let mut steps = Vec::new();
    for field in hashed.iter().filter(|f| !is_oneof(f)) {
        let name = &field.wire;
        let spec = field_spec(p, field);
        steps.push(quote!(let __idem_spec = __idem_spec.field(#name, #spec);));
        // `skip_serializing_if = "Vec::is_empty"` (any `is_empty`): an empty value is left out
        // by the derive, so an empty member is left out by the spec.
        if field
            .attrs
            .skip_serializing_if
            .as_ref()
            .and_then(|p| p.path.segments.last())
            .is_some_and(|last| last.ident == "is_empty")
        {
            steps.push(quote!(let __idem_spec = __idem_spec.omit_empty(#name);));
        }
        // serde never reads a `skip_deserializing` field, nor a renamed one under the name it
        // is written under: such members are unknown to it, and so to the spec.
        if field.attrs.skip_deserializing || !field.reads_wire {
            steps.push(quote!(let __idem_spec = __idem_spec.unread(#name);));
        }
        if !field.attrs.skip_deserializing {
            for input in &field.inputs {
                steps.push(quote!(let __idem_spec = __idem_spec.alias(#input, #name);));
            }
        }
        let default = match (&field.attrs.default, container) {
            (Some(own), _) => Some(default_value(p, field, own, false)),
            (None, Some(whole)) => Some(default_value(p, field, whole, true)),
            (None, None) if field.attrs.skip_deserializing => {
                Some(default_value(p, field, &SerdeDefault::Trait, false))
            }
            (None, None) => None,
        };
        if let Some(text) = default {
            steps.push(quote! {
                let __idem_spec = match #text {
                    #pv::Some(__idem_text) => __idem_spec.default_value(#name, __idem_text),
                    #pv::None => __idem_spec,
                };
            });
        }
    }
    for field in fields.iter().filter(|f| f.kind() != Kind::Hashed) {
        for input in field.inputs.iter().chain([&field.wire]) {
            steps.push(quote!(let __idem_spec = __idem_spec.env(#input);));
        }
    }
    quote!({
        let __idem_spec = #pv::Spec::new();
        #(#steps)*
        #(#oneofs)*
        #pv::ValueSpec::Object(__idem_spec)
    })
}

/// An expression of type `Option<String>`: the canonical text of `field`'s default value
/// (`None` when it is null or `skip_serializing_if` holds, as a member the derive then omits),
/// written as the field is. `whole`:
/// the default is the struct's, and the field's value is taken from it.
fn default_value(p: &Paths, field: &Field<'_>, default: &SerdeDefault, whole: bool) -> TokenStream {
    let pv = &p.private;
    let ty = field.ty;
    let member = &field.member;
    let value = match (default, whole) {
        (SerdeDefault::Trait, false) => quote!(<#ty as ::core::default::Default>::default()),
        (SerdeDefault::Path(path), false) => quote!(#path()),
        (SerdeDefault::Trait, true) => {
            quote!(<Self as ::core::default::Default>::default().#member)
        }
        (SerdeDefault::Path(path), true) => {
            quote!({ let __idem_whole: Self = #path(); __idem_whole.#member })
        }
    };
    let access = quote!(&__idem_default);
    let write = write_value(p, field, &access);
    let mut is_null = null_check(p, field, &access).unwrap_or_else(|| quote!(false));
    // A member the derive leaves out for this value is left out as the default too.
    if let Some(path) = &field.attrs.skip_serializing_if {
        is_null = quote!((#is_null || #path(#access)));
    }
    quote!({
        let __idem_default: #ty = #value;
        if #is_null {
            #pv::None
        } else {
            #pv::Some(#pv::canonical_text(|__idem_w| { #write }))
        }
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
            Style::Struct => Some(object_spec(p, &variant.fields, None)),
        };
        match payload {
            Some(spec) => quote!((#name, #pv::Some(#spec))),
            None => quote!((#name, #pv::None)),
        }
    });
    quote!(#pv::enum_spec([#(#variants),*]))
}
