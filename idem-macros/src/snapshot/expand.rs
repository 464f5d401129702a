//! Code generation. Cannot fail: everything was checked before.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::ast::Container;
use crate::fingerprint::for_each_path;

pub(crate) fn expand(cont: &Container<'_>) -> TokenStream {
    let krate = &cont.krate;
    let pv = quote!(#krate::__private);
    let ident = cont.ident;
    let field = cont.biz_no.ident;
    let ty = &cont.biz_no.field.ty;
    let wire = &cont.biz_no.wire;

    // `T: Display` for a business number whose type uses a type parameter.
    let mut generics = cont.generics.clone();
    let params: Vec<&syn::Ident> = cont.generics.type_params().map(|t| &t.ident).collect();
    let mut generic = false;
    for_each_path(ty, &mut |path| {
        generic |= path.leading_colon.is_none()
            && path
                .segments
                .first()
                .is_some_and(|first| params.contains(&&first.ident));
    });
    if generic {
        generics
            .make_where_clause()
            .predicates
            .push(syn::parse_quote!(#ty: ::core::fmt::Display));
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();

    // Spanned on the field's type: a type without `Display` is reported there.
    let to_string = quote_spanned! {ty.span()=>
        __idem_display::<#ty>(&self.#field)
    };
    // Key fields as JSON values, each spanned on its type (a type without `Serialize` is reported
    // there).
    let key_fields = cont.keys.iter().map(|key| {
        let (name, wire, ty) = (key.ident, &key.wire, &key.field.ty);
        quote_spanned! {ty.span()=>
            (#wire, #pv::json_value::<#ty>(&self.#name))
        }
    });
    let key_fields_fn = if cont.keys.is_empty() {
        quote!()
    } else {
        quote! {
            fn key_fields(
                &self,
            ) -> ::std::vec::Vec<(&'static ::core::primitive::str, #pv::serde_json::Value)> {
                ::std::vec![#(#key_fields),*]
            }
        }
    };
    // A prost message: `Default`, and its business number a `String` (checked).
    let from_biz_no = (cont.proto && cont.generics.params.is_empty()).then(|| {
        quote! {
            fn from_biz_no(biz_no: &::core::primitive::str) -> ::core::option::Option<Self> {
                ::core::option::Option::Some(Self {
                    #field: ::core::convert::From::from(biz_no),
                    ..::core::default::Default::default()
                })
            }
        }
    });
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics #pv::Snapshot for #ident #ty_generics #where_clause {
                const BIZ_NO_FIELD: &'static ::core::primitive::str = #wire;

                fn biz_no(&self) -> ::std::string::String {
                    fn __idem_display<T: ?::core::marker::Sized + ::core::fmt::Display>(
                        value: &T,
                    ) -> ::std::string::String {
                        ::std::string::ToString::to_string(value)
                    }
                    #to_string
                }

                #key_fields_fn

                #from_biz_no
            }
        };
    }
}
