//! Code generation. Cannot fail: everything was checked before.
//!
//! Members are sorted by the bytes of their wire names here, at expansion time, and each member's
//! name is escaped into two byte-string literals, `{"name":` for the first member written and
//! `,"name":` for the others. The generated writers are straight sequences of
//! `__private::open_member` and `<FieldTy as Canonical>::write_canonical` calls (or the `float`,
//! `base64` and `with` writers), ended by `__private::close_object`: no sorting, no escaping and
//! no allocation at run time. Generated code calls only the public `Canonical` and
//! `CanonicalWriter` methods and `#krate::__private` items.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use super::ast::{Container, Data, Field, Kind, Style, Variant, Writer, sorted_hashed};
use super::paths::{Paths, null_check};
use super::proto_expand::{self, is_oneof, proto_of, write_value};
use super::spec::{array_spec, enum_spec, field_spec, object_spec};
use super::types::for_each_path;
use crate::json;

pub(crate) fn expand(cont: &Container<'_>, krate: &syn::Path) -> TokenStream {
    let p = Paths {
        private: quote!(#krate::__private),
    };
    let pv = &p.private;
    let ident = cont.ident;
    let generics = with_bounds(cont, &p);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();

    let canonical_body = canonical_body(cont, &p);
    let fingerprint_body = fingerprint_body(cont, &p);
    let fields_struct = fields_struct(cont, pv).map(|f| f.decl);
    let oneof = match &cont.data {
        Data::Enum(variants) if cont.proto => Some(proto_expand::oneof_impl(
            &p,
            quote!(impl #impl_generics #pv::ProtoOneof for #ident #ty_generics #where_clause),
            variants,
            &|f| field_spec(&p, f),
        )),
        _ => None,
    };

    quote! {
        const _: () = {
            #fields_struct

            #oneof

            #[automatically_derived]
            impl #impl_generics #pv::Canonical for #ident #ty_generics #where_clause {
                #canonical_body
            }

            #[automatically_derived]
            impl #impl_generics #pv::Fingerprint for #ident #ty_generics #where_clause {
                #fingerprint_body
            }
        };
    }
}

/// The user's generics, plus `T: Canonical` for every type parameter a written field uses.
fn with_bounds(cont: &Container<'_>, p: &Paths) -> syn::Generics {
    let pv = &p.private;
    let params: Vec<&syn::Ident> = cont.generics.type_params().map(|t| &t.ident).collect();
    let mut generics = cont.generics.clone();
    if params.is_empty() {
        return generics;
    }
    let mut predicates: Vec<syn::WherePredicate> = Vec::new();
    let mut push = |pred: syn::WherePredicate| {
        if !predicates.contains(&pred) {
            predicates.push(pred);
        }
    };
    for field in written_fields(cont) {
        let trait_path = match field.writer() {
            Writer::Canonical => quote!(#pv::Canonical),
            Writer::Float => quote!(#pv::FloatField),
            Writer::Base64 => quote!(#pv::Base64Field),
            Writer::With(_) => continue,
        };
        let mut uses = Vec::new();
        for_each_path(field.ty, &mut |path| {
            if path.leading_colon.is_none()
                && let Some(first) = path.segments.first()
                && params.contains(&&first.ident)
            {
                uses.push(path);
            }
        });
        if uses.is_empty() {
            continue;
        }
        if !matches!(field.writer(), Writer::Canonical) {
            let ty = field.ty;
            push(syn::parse_quote!(#ty: #trait_path));
            continue;
        }
        for path in uses {
            // `T` -> `T: Canonical`; `T::Assoc` -> `T::Assoc: Canonical`.
            push(syn::parse_quote!(#path: #trait_path));
        }
    }
    generics.make_where_clause().predicates.extend(predicates);
    generics
}

/// The fields whose values the generated code writes.
fn written_fields<'c, 'a>(cont: &'c Container<'a>) -> Vec<&'c Field<'a>> {
    match &cont.data {
        Data::Struct(Style::Newtype, fields) => fields.iter().collect(),
        Data::Struct(_, fields) if cont.attrs.transparent.is_some() => {
            transparent_field(fields).into_iter().collect()
        }
        _ => cont
            .all_fields()
            .filter(|f| f.kind() == Kind::Hashed)
            .collect(),
    }
}

/// The field of a `#[serde(transparent)]` struct (checked to be the only serialized one).
fn transparent_field<'c, 'a>(fields: &'c [Field<'a>]) -> Option<&'c Field<'a>> {
    fields.iter().find(|f| f.attrs.serde_skip.is_none())
}

fn canonical_body(cont: &Container<'_>, p: &Paths) -> TokenStream {
    let pv = &p.private;
    let w = quote!(__idem_w: &mut #pv::CanonicalWriter<'_>);
    let (write, is_null, spec) = match &cont.data {
        Data::Struct(_, fields) if cont.attrs.transparent.is_some() => {
            match transparent_field(fields) {
                Some(field) => value_of(p, field, &self_access(field)),
                None => (quote!(__idem_w.null();), None, quote!(#pv::ValueSpec::Any)),
            }
        }
        Data::Struct(Style::Struct, fields) => (
            object(p, fields, &self_access, false),
            None,
            object_spec(p, fields, cont.attrs.default.as_ref()),
        ),
        Data::Struct(Style::Newtype, fields) => value_of(p, &fields[0], &self_access(&fields[0])),
        Data::Struct(Style::Tuple, fields) => {
            (array(p, fields, &self_access), None, array_spec(p, fields))
        }
        Data::Struct(Style::Unit, _) => (
            quote!(__idem_w.null();),
            Some(quote!(true)),
            quote!(#pv::ValueSpec::Any),
        ),
        Data::Enum(variants) if cont.proto => (
            enum_write(p, variants),
            None,
            quote!(#pv::ValueSpec::Object(
                <Self as #pv::ProtoOneof>::add_proto_members(#pv::Spec::new())
            )),
        ),
        Data::Enum(variants) => (enum_write(p, variants), None, enum_spec(p, variants)),
    };
    let is_null = is_null.map(|expr| {
        quote! {
            #[inline]
            fn is_null(&self) -> #pv::bool {
                #expr
            }
        }
    });
    quote! {
        #[inline]
        fn write_canonical(&self, #w) {
            #write
        }

        #is_null

        fn value_spec() -> #pv::ValueSpec {
            #spec
        }
    }
}

fn fingerprint_body(cont: &Container<'_>, p: &Paths) -> TokenStream {
    let pv = &p.private;
    let w = quote!(__idem_w: &mut #pv::CanonicalWriter<'_>);
    let Some(FieldsStruct { name, value, .. }) = fields_struct(cont, pv) else {
        return quote! {
            type Fields = #pv::NoFields;
            const FIELDS: #pv::NoFields = #pv::NoFields;

            #[inline]
            fn write_fields(&self, #w, _: #pv::FieldMask) {
                #pv::Canonical::write_canonical(self, __idem_w);
            }
        };
    };
    let fields = cont.named_fields();
    let mask = if fields.iter().any(|f| f.kind() == Kind::Hashed) {
        quote!(__idem_mask)
    } else {
        quote!(_)
    };
    let write = object(p, fields, &self_access, true);
    quote! {
        type Fields = #name;
        const FIELDS: #name = #value;

        #[inline]
        fn write_fields(&self, #w, #mask: #pv::FieldMask) {
            #write
        }
    }
}

/// `struct __IdemFieldsOfT { pub amount: FieldRef<Hashed>, .. }`, the `Fingerprint::Fields` of a
/// struct with named fields, and its value. The struct is `pub` inside the anonymous `const _`
/// block: reachable through `<T as Fingerprint>::Fields` only, so it neither pollutes the user's
/// namespace nor trips the private-type-in-public-interface checks. `None` for other shapes.
pub(crate) fn fields_struct(cont: &Container<'_>, pv: &TokenStream) -> Option<FieldsStruct> {
    if !matches!(cont.data, Data::Struct(Style::Struct, _)) || cont.attrs.transparent.is_some() {
        return None;
    }
    let doc = format!(
        "The fields of `{}` that `idem::fields!` can name.",
        cont.ident
    );
    let fields = cont.named_fields();
    let decls = fields.iter().map(|f| {
        let name = &f.member;
        let kind = match f.kind() {
            Kind::Hashed => quote!(Hashed),
            Kind::Env => quote!(Env),
            Kind::Skipped => quote!(Skipped),
        };
        quote!(pub #name: #pv::FieldRef<#pv::#kind>)
    });
    let inits = fields.iter().map(|f| {
        let name = &f.member;
        // Over 128 fields is an error of its own; keep the fallback's shifts in range.
        let bit = (f.index as u32).min(127);
        quote!(#name: #pv::FieldRef::new(#bit))
    });
    let name = format_ident!("__IdemFieldsOf{}", cont.ident.unraw());
    Some(FieldsStruct {
        decl: quote! {
            #[doc = #doc]
            #[doc(hidden)]
            #[allow(
                non_camel_case_types,
                non_snake_case,
                missing_docs,
                missing_debug_implementations,
                unreachable_pub,
                dead_code
            )]
            pub struct #name {
                #(#decls,)*
            }
        },
        value: quote!(#name { #(#inits,)* }),
        name,
    })
}

/// The `Fingerprint::Fields` struct of a struct with named fields.
pub(crate) struct FieldsStruct {
    /// `struct __IdemFieldsOfT { .. }`.
    pub(crate) decl: TokenStream,
    /// `__IdemFieldsOfT`.
    pub(crate) name: syn::Ident,
    /// `__IdemFieldsOfT { a: FieldRef::new(0), .. }`.
    pub(crate) value: TokenStream,
}

/// `&self.field`.
fn self_access(field: &Field<'_>) -> TokenStream {
    let member = &field.member;
    quote!(&self.#member)
}

/// The binding of field `index` in a `match self` arm (a reference, by default binding mode).
fn binding(field: &Field<'_>) -> syn::Ident {
    format_ident!("__idem_{}", field.index)
}

/// (write statements, `is_null` body, spec) of a value that is exactly one field (newtype,
/// `#[serde(transparent)]`).
fn value_of(
    p: &Paths,
    field: &Field<'_>,
    value: &TokenStream,
) -> (TokenStream, Option<TokenStream>, TokenStream) {
    (
        write_value(p, field, value),
        null_check(p, field, value),
        field_spec(p, field),
    )
}

/// Statements writing the object of the hashed `fields`; with `masked`, only those whose bit is
/// in `__idem_mask`. The members of oneofs (prost messages), whose names are known at run time
/// only, are merged in between by `__idem_oneofs`.
fn object(
    p: &Paths,
    fields: &[Field<'_>],
    access: &dyn Fn(&Field<'_>) -> TokenStream,
    masked: bool,
) -> TokenStream {
    let pv = &p.private;
    let hashed = sorted_hashed(fields);
    if hashed.is_empty() {
        return quote!(__idem_w.raw(b"{}"););
    }
    let oneofs: Vec<&Field<'_>> = hashed.iter().copied().filter(|f| is_oneof(f)).collect();
    let init_oneofs =
        (!oneofs.is_empty()).then(|| proto_expand::oneofs_init(p, &oneofs, access, masked));
    let members = hashed.iter().filter(|f| !is_oneof(f)).map(|field| {
        let value = access(field);
        // `{"name":` for the first member written, `,"name":` for the others.
        let open = syn::LitByteStr::new(&json::open_tagged(&field.wire), Span::call_site());
        let mut next = json::open_tagged(&field.wire);
        next[0] = b',';
        let next = syn::LitByteStr::new(&next, Span::call_site());
        let mut conditions = Vec::new();
        if masked {
            let bit = field.index as u32;
            conditions.push(quote!(__idem_mask.contains(#bit)));
        }
        if let Some(path) = &field.attrs.skip_serializing_if {
            conditions.push(quote_spanned!(path.span()=> !#path(#value)));
        }
        let open = quote!(#pv::open_member(__idem_w, &mut __idem_first, #open, #next););
        let member = match proto_of(field) {
            Some(proto) => proto_expand::member(p, field, proto, &value, open),
            None => {
                if let Some(is_null) = null_check(p, field, &value) {
                    conditions.push(quote!(!#is_null));
                }
                let write = write_value(p, field, &value);
                quote!(#open #write)
            }
        };
        let member = if conditions.is_empty() {
            member
        } else {
            quote!(if #(#conditions)&&* { #member })
        };
        let before = init_oneofs.is_some().then(|| {
            let wire = &field.wire;
            quote!(__idem_oneofs.write_before(__idem_w, &mut __idem_first, #pv::Some(#wire));)
        });
        quote!(#before #member)
    });
    let rest = init_oneofs
        .is_some()
        .then(|| quote!(__idem_oneofs.write_before(__idem_w, &mut __idem_first, #pv::None);));
    quote! {
        let mut __idem_first = true;
        #init_oneofs
        #(#members)*
        #rest
        #pv::close_object(__idem_w, __idem_first);
    }
}

/// Statements writing the fields not skipped by serde as an array, in order.
fn array(
    p: &Paths,
    fields: &[Field<'_>],
    access: &dyn Fn(&Field<'_>) -> TokenStream,
) -> TokenStream {
    let pv = &p.private;
    let elements: Vec<_> = fields.iter().filter(|f| f.kind() == Kind::Hashed).collect();
    let conditional = elements
        .iter()
        .any(|f| f.attrs.skip_serializing_if.is_some());
    let mut body = quote!(__idem_w.raw(b"["););
    if conditional {
        body.extend(quote!(let mut __idem_first = true;));
    }
    for (i, field) in elements.iter().enumerate() {
        let value = access(field);
        let write = write_value(p, field, &value);
        if conditional {
            let element = quote! {
                #pv::separator(__idem_w, &mut __idem_first);
                #write
            };
            body.extend(match &field.attrs.skip_serializing_if {
                Some(path) => quote_spanned!(path.span()=> if !#path(#value) { #element }),
                None => element,
            });
        } else {
            if i > 0 {
                body.extend(quote!(__idem_w.raw(b",");));
            }
            body.extend(write);
        }
    }
    body.extend(quote!(__idem_w.raw(b"]");));
    body
}

fn enum_write(p: &Paths, variants: &[Variant<'_>]) -> TokenStream {
    if variants.is_empty() {
        return quote!(match *self {});
    }
    let arms = variants.iter().map(|variant| {
        let ident = variant.ident;
        let unit = syn::LitByteStr::new(&json::string(&variant.wire), Span::call_site());
        let open = syn::LitByteStr::new(&json::open_tagged(&variant.wire), Span::call_site());
        let by_binding = |f: &Field<'_>| {
            let b = binding(f);
            quote!(#b)
        };
        match variant.style {
            Style::Unit => quote!(Self::#ident => __idem_w.raw(#unit),),
            Style::Newtype if variant.fields[0].kind() == Kind::Skipped => {
                // serde writes a newtype variant whose field is skipped as a unit variant.
                quote!(Self::#ident(..) => __idem_w.raw(#unit),)
            }
            Style::Newtype => {
                let field = &variant.fields[0];
                let b = binding(field);
                let write = write_value(p, field, &quote!(#b));
                quote! {
                    Self::#ident(#b) => {
                        __idem_w.raw(#open);
                        #write
                        __idem_w.end_object();
                    }
                }
            }
            Style::Tuple => {
                let pats = variant.fields.iter().map(|f| match f.kind() {
                    Kind::Hashed => by_binding(f),
                    _ => quote!(_),
                });
                let write = array(p, &variant.fields, &by_binding);
                quote! {
                    Self::#ident(#(#pats),*) => {
                        __idem_w.raw(#open);
                        #write
                        __idem_w.end_object();
                    }
                }
            }
            Style::Struct => {
                let pats = variant
                    .fields
                    .iter()
                    .filter(|f| f.kind() == Kind::Hashed)
                    .map(|f| {
                        let member = &f.member;
                        let b = binding(f);
                        quote!(#member: #b)
                    });
                let write = object(p, &variant.fields, &by_binding, false);
                quote! {
                    Self::#ident { #(#pats,)* .. } => {
                        __idem_w.raw(#open);
                        #write
                        __idem_w.end_object();
                    }
                }
            }
        }
    });
    quote! {
        match self {
            #(#arms)*
        }
    }
}
