//! `#[derive(Snapshot)]`: parse and check (`ast`) -> expand (`expand`); on error, the errors
//! plus a fallback impl (`fallback`), so that code using the type reports the derive's mistake
//! only, not "`T` does not implement `Snapshot`" at every use.

mod ast;
mod expand;

use proc_macro2::TokenStream;
use quote::quote;

use crate::ctxt::Ctxt;
use ast::Container;

/// The expansion of `#[derive(Snapshot)]` on `input`, or every error found in it.
pub(crate) fn derive(input: &syn::DeriveInput) -> syn::Result<TokenStream> {
    let cx = Ctxt::new();
    let cont = Container::from_ast(&cx, input);
    cx.check()?;
    let Some(cont) = cont else {
        unreachable!("Container::from_ast returns None only after recording an error");
    };
    let tokens = expand::expand(&cont);
    if std::env::var_os("IDEM_MACROS_DEBUG").is_some() {
        eprintln!("#[derive(Snapshot)] on `{}`:\n{tokens}", input.ident);
    }
    Ok(tokens)
}

/// `errors` plus an impl whose `biz_no` is `unreachable!()`.
pub(crate) fn fallback(input: &syn::DeriveInput, errors: syn::Error) -> TokenStream {
    let cx = Ctxt::new();
    let krate = ast::crate_path(&cx, &input.attrs);
    // Already reported by `derive`.
    let _ = cx.check();
    let krate = krate.unwrap_or_else(crate::fields::default_crate_path);
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let errors = errors.into_compile_error();
    quote! {
        #errors
        const _: () = {
            #[automatically_derived]
            impl #impl_generics #krate::__private::Snapshot for #ident #ty_generics #where_clause {
                const BIZ_NO_FIELD: &'static ::core::primitive::str = "";
                fn biz_no(&self) -> ::std::string::String {
                    ::core::unreachable!()
                }
            }
        };
    }
}
