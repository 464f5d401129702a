//! `#[derive(Fingerprint)]`: parse (`ast`, `attr`) -> check (`check`) -> expand (`expand`); on
//! error, the errors plus a fallback impl (`fallback`) so that the user sees the real mistake
//! only, not a cascade of "`T` does not implement `Fingerprint`".

mod ast;
mod attr;
mod check;
mod expand;
mod paths;
pub(crate) mod proto;
mod proto_expand;
mod spec;
mod types;

use proc_macro2::TokenStream;
use quote::quote;

use crate::ctxt::Ctxt;
use ast::Container;
pub(crate) use types::for_each_path;

/// The expansion of `#[derive(Fingerprint)]` on `input`, or every error found in it.
pub(crate) fn derive(input: &syn::DeriveInput) -> syn::Result<TokenStream> {
    let cx = Ctxt::new();
    let Some(cont) = Container::from_ast(&cx, input) else {
        cx.check()?;
        unreachable!("Container::from_ast returns None only after recording an error");
    };
    check::check(&cx, &cont);
    cx.check()?;
    let krate = crate_path(&cont);
    let tokens = expand::expand(&cont, &krate);
    if std::env::var_os("IDEM_MACROS_DEBUG").is_some() {
        eprintln!("#[derive(Fingerprint)] on `{}`:\n{tokens}", input.ident);
    }
    Ok(tokens)
}

/// `errors` plus impls whose bodies are `unreachable!()`: the type still implements `Canonical`
/// and `Fingerprint` (with its `Fields`, when they could be read), so code that uses it compiles
/// and only the errors of the derive itself are reported.
pub(crate) fn fallback(input: &syn::DeriveInput, errors: syn::Error) -> TokenStream {
    let cx = Ctxt::new();
    let cont = Container::from_ast(&cx, input);
    // Already reported by `derive`.
    let _ = cx.check();

    let krate = cont.as_ref().map_or_else(default_crate_path, crate_path);
    let pv = quote!(#krate::__private);
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let (fields_struct, fields_ty, fields_value) =
        match cont.as_ref().and_then(|c| expand::fields_struct(c, &pv)) {
            Some(f) => {
                let name = f.name;
                (f.decl, quote!(#name), f.value)
            }
            None => (quote!(), quote!(#pv::NoFields), quote!(#pv::NoFields)),
        };
    // A oneof's message names it as a `ProtoOneofField`: keep that compiling too.
    let oneof = cont
        .as_ref()
        .filter(|c| c.proto && matches!(c.data, ast::Data::Enum(_)))
        .map(|_| {
            quote! {
                #[automatically_derived]
                impl #impl_generics #pv::ProtoOneof for #ident #ty_generics #where_clause {
                    fn proto_member(&self) -> &'static #pv::str {
                        ::core::unreachable!()
                    }
                    fn write_proto_value(&self, _: &mut #pv::CanonicalWriter<'_>) {
                        ::core::unreachable!()
                    }
                    fn add_proto_members(_: #pv::Spec) -> #pv::Spec {
                        ::core::unreachable!()
                    }
                }
            }
        });
    let errors = errors.into_compile_error();
    quote! {
        #errors
        const _: () = {
            #fields_struct

            #oneof

            #[automatically_derived]
            impl #impl_generics #pv::Canonical for #ident #ty_generics #where_clause {
                fn write_canonical(&self, _: &mut #pv::CanonicalWriter<'_>) {
                    ::core::unreachable!()
                }
                fn value_spec() -> #pv::ValueSpec {
                    ::core::unreachable!()
                }
            }

            #[automatically_derived]
            impl #impl_generics #pv::Fingerprint for #ident #ty_generics #where_clause {
                type Fields = #fields_ty;
                const FIELDS: #fields_ty = #fields_value;
                fn write_fields(&self, _: &mut #pv::CanonicalWriter<'_>, _: #pv::FieldMask) {
                    ::core::unreachable!()
                }
            }
        };
    }
}

fn crate_path(cont: &Container<'_>) -> syn::Path {
    cont.attrs.krate.clone().unwrap_or_else(default_crate_path)
}

fn default_crate_path() -> syn::Path {
    syn::parse_quote!(::idem)
}
