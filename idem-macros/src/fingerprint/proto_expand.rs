//! Code generation for the fields of prost messages and the variants of `prost::Oneof` enums
//! (docs/fingerprint.md, "Protocol Buffers messages"): fields without presence are omitted at
//! their proto3 default, fields with presence when unset; bytes are base64; maps are objects
//! whatever their key type; a oneof's set variant is a member of the message (`Oneofs`). Also
//! [`write_value`], the statements writing any field's value, which the struct expansion calls
//! and which calls back into the prost writers for prost fields: one module, so that the two
//! recursive halves do not import each other.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::ast::{Field, Style, Variant, Writer};
use super::paths::{Paths, qualified};
use super::proto::{Label, Proto, ProtoKind, is_byte_buffer, is_unit, option_inner};
use crate::respan::respan;

/// The prost attribute of a hashed field that the derive writes itself (not `with = path`).
pub(super) fn proto_of<'f>(field: &'f Field<'_>) -> Option<&'f Proto> {
    match field.writer() {
        Writer::With(_) => None,
        _ => field.attrs.proto.as_ref(),
    }
}

/// Whether `field` is a oneof (its members are merged into the message by `Oneofs`).
pub(super) fn is_oneof(field: &Field<'_>) -> bool {
    proto_of(field).is_some_and(|p| p.kind == ProtoKind::Oneof)
}

/// `if <present> { <open>; <write> }` for a field of a message.
pub(super) fn member(
    p: &Paths,
    field: &Field<'_>,
    proto: &Proto,
    value: &TokenStream,
    open: TokenStream,
) -> TokenStream {
    let pv = &p.private;
    let float = field.writer_is_float();
    let ty = field.ty;
    let at = |tokens: TokenStream| respan(tokens, ty.span());
    match (proto.kind, proto.label) {
        // An entry of a map or an element of a list is always present.
        (ProtoKind::Map { .. }, _) => {
            let write = write(p, field, proto, value, ty);
            quote!(if !#pv::proto_map_is_empty(#value) { #open #write })
        }
        (_, Label::Repeated) => {
            let write = write(p, field, proto, value, ty);
            let is_empty = at(quote!(<[_]>::is_empty));
            quote!(if !#is_empty(#value) { #open #write })
        }
        (_, Label::Required) => {
            let write = write(p, field, proto, value, ty);
            quote!(#open #write)
        }
        // A float `None` or NaN (no canonical form) is left out, as everywhere.
        (_, Label::Optional) | (ProtoKind::Message, _) if float => {
            let is_null = at(quote!(<#ty as #pv::FloatField>::is_null));
            let write = write(p, field, proto, value, ty);
            quote!(if !#is_null(#value) { #open #write })
        }
        (_, Label::Optional) | (ProtoKind::Message, _) | (ProtoKind::Group, _) => {
            let inner = option_inner(ty).unwrap_or(ty);
            let write = write(p, field, proto, &quote!(__idem_x), inner);
            let as_ref = at(quote!(#pv::Option::as_ref));
            quote!(if let #pv::Some(__idem_x) = #as_ref(#value) { #open #write })
        }
        (ProtoKind::Bytes, Label::Plain) => {
            let write = write(p, field, proto, value, ty);
            let is_empty = at(quote!(#pv::proto_bytes_is_empty));
            quote!(if !#is_empty(#value) { #open #write })
        }
        (_, Label::Plain) => {
            let is_default = at(quote!(<#ty as #pv::ProtoDefault>::is_proto_default));
            let nan = float.then(|| {
                let is_null = at(quote!(<#ty as #pv::FloatField>::is_null));
                quote!(&& !#is_null(#value))
            });
            let write = write(p, field, proto, value, ty);
            quote!(if !#is_default(#value) #nan { #open #write })
        }
    }
}

/// Statements writing `value`, of type `&ty`, by its protobuf kind.
pub(super) fn write(
    p: &Paths,
    field: &Field<'_>,
    proto: &Proto,
    value: &TokenStream,
    ty: &syn::Type,
) -> TokenStream {
    let pv = &p.private;
    let at = |tokens: TokenStream| respan(tokens, ty.span());
    let float = field.writer_is_float();
    match (proto.kind, proto.label) {
        (ProtoKind::Map { bytes_values }, _) => {
            let value_write = if bytes_values {
                quote!(#pv::proto_bytes(__idem_v, __idem_w))
            } else if float {
                quote!(#pv::FloatField::write_float(__idem_v, __idem_w))
            } else {
                quote!(#pv::Canonical::write_canonical(__idem_v, __idem_w))
            };
            let map = at(quote!(#pv::proto_map));
            quote! {
                #map(__idem_w, #value, |__idem_v, __idem_w: &mut #pv::CanonicalWriter<'_>| {
                    #value_write;
                });
            }
        }
        (ProtoKind::Bytes, Label::Repeated) => {
            let f = at(quote!(#pv::proto_repeated_bytes));
            quote!(#f(#value, __idem_w);)
        }
        (ProtoKind::Bytes, _) => {
            let f = at(quote!(#pv::proto_bytes));
            quote!(#f(#value, __idem_w);)
        }
        (ProtoKind::Message, Label::Optional | Label::Required | Label::Plain) if is_unit(ty) => {
            // `google.protobuf.Empty`: an empty message, not `null`.
            quote!(__idem_w.raw(b"{}");)
        }
        (ProtoKind::Message, Label::Optional | Label::Required | Label::Plain)
            if is_byte_buffer(ty) =>
        {
            // `google.protobuf.BytesValue`.
            let f = at(quote!(#pv::proto_bytes));
            quote!(#f(#value, __idem_w);)
        }
        _ if float => {
            let f = at(quote!(<#ty as #pv::FloatField>::write_float));
            quote!(#f(#value, __idem_w);)
        }
        _ => {
            let f = at(quote!(<#ty as #pv::Canonical>::write_canonical));
            quote!(#f(#value, __idem_w);)
        }
    }
}

/// The run-time spec of a prost field, where its kind decides it (bytes, maps); `None` for the
/// type's own.
pub(super) fn spec(p: &Paths, field: &Field<'_>, proto: &Proto) -> Option<TokenStream> {
    let pv = &p.private;
    let inner = option_inner(field.ty).unwrap_or(field.ty);
    Some(match (proto.kind, proto.label) {
        (ProtoKind::Map { bytes_values: true }, _) => {
            quote!(#pv::ValueSpec::Map(::std::boxed::Box::new(#pv::ValueSpec::Base64)))
        }
        (ProtoKind::Map { .. }, _) => {
            quote!(#pv::ValueSpec::Map(::std::boxed::Box::new(#pv::ValueSpec::Any)))
        }
        (ProtoKind::Bytes, Label::Repeated) => {
            quote!(#pv::ValueSpec::Array(::std::boxed::Box::new(#pv::ValueSpec::Base64)))
        }
        (ProtoKind::Bytes, _) => quote!(#pv::ValueSpec::Base64),
        (ProtoKind::Message, _) if is_byte_buffer(inner) => quote!(#pv::ValueSpec::Base64),
        (ProtoKind::Message, _) if is_unit(inner) => quote!(#pv::ValueSpec::Any),
        _ => return None,
    })
}

/// `let mut __idem_oneofs = Oneofs::new([..]);`, the set oneofs of the message (those in the
/// mask, with `masked`).
pub(super) fn oneofs_init(
    p: &Paths,
    oneofs: &[&Field<'_>],
    access: &dyn Fn(&Field<'_>) -> TokenStream,
    masked: bool,
) -> TokenStream {
    let pv = &p.private;
    let set = oneofs.iter().map(|field| {
        let ty = field.ty;
        let value = access(field);
        let f = respan(
            quote!(<#ty as #pv::ProtoOneofField>::proto_oneof),
            ty.span(),
        );
        if masked {
            let bit = field.index as u32;
            quote!(if __idem_mask.contains(#bit) { #f(#value) } else { #pv::None })
        } else {
            quote!(#f(#value))
        }
    });
    quote!(let mut __idem_oneofs = #pv::Oneofs::new([#(#set),*]);)
}

/// `impl ProtoOneof` for a `prost::Oneof` enum: the set variant's member name and value.
pub(super) fn oneof_impl(
    p: &Paths,
    header: TokenStream,
    variants: &[Variant<'_>],
    spec_of: &dyn Fn(&Field<'_>) -> TokenStream,
) -> TokenStream {
    let pv = &p.private;
    let newtypes: Vec<_> = variants
        .iter()
        .filter(|v| v.style == Style::Newtype)
        .collect();
    let names = newtypes.iter().map(|v| {
        let (ident, wire) = (v.ident, &v.wire);
        quote!(Self::#ident(..) => #wire,)
    });
    let writes = newtypes.iter().map(|v| {
        let ident = v.ident;
        let field = &v.fields[0];
        let value = quote!(__idem_0);
        let write = match &field.attrs.proto {
            Some(proto) if !matches!(field.writer(), Writer::With(_)) => {
                write(p, field, &required(proto), &value, field.ty)
            }
            _ => write_value(p, field, &value),
        };
        quote!(Self::#ident(__idem_0) => { #write })
    });
    let members = newtypes.iter().map(|v| {
        let wire = &v.wire;
        let spec = spec_of(&v.fields[0]);
        quote!(let __idem_spec = __idem_spec.field(#wire, #spec);)
    });
    // Other shapes are errors of their own (and of prost's derive).
    let rest = (newtypes.len() < variants.len()).then(|| quote!(_ => ::core::unreachable!(),));
    let (names, writes) = if variants.is_empty() {
        (quote!(match *self {}), quote!(match *self {}))
    } else {
        (
            quote!(match self { #(#names)* #rest }),
            quote!(match self { #(#writes)* #rest }),
        )
    };
    quote! {
        #[automatically_derived]
        #header {
            fn proto_member(&self) -> &'static #pv::str {
                #names
            }

            fn write_proto_value(&self, __idem_w: &mut #pv::CanonicalWriter<'_>) {
                #writes
            }

            fn add_proto_members(__idem_spec: #pv::Spec) -> #pv::Spec {
                #(#members)*
                __idem_spec
            }
        }
    }
}

/// A oneof variant's value is always present: written like a `required` field.
pub(super) fn required(proto: &Proto) -> Proto {
    Proto {
        label: Label::Required,
        ..proto.clone()
    }
}

/// Statements writing `value` (an expression of type `&FieldTy`).
pub(super) fn write_value(p: &Paths, field: &Field<'_>, value: &TokenStream) -> TokenStream {
    if let Some(proto) = proto_of(field) {
        // The whole value of a newtype or a oneof variant: present.
        return write(p, field, &required(proto), value, field.ty);
    }
    match field.writer() {
        Writer::Canonical => {
            let f = qualified(p, field, "Canonical", "write_canonical");
            quote!(#f(#value, __idem_w);)
        }
        Writer::Float => {
            let f = qualified(p, field, "FloatField", "write_float");
            quote!(#f(#value, __idem_w);)
        }
        Writer::Base64 => {
            let f = qualified(p, field, "Base64Field", "write_base64");
            quote!(#f(#value, __idem_w);)
        }
        Writer::With(path) => quote_spanned!(path.span()=> #path(#value, __idem_w);),
    }
}
