//! `#[idempotent(..)]`: parse (`attr`) -> check (`check`, building the `ast::Plan`) -> expand
//! (`expand`). On error: the errors plus the function exactly as written, so that rustc and IDEs
//! report the attribute's mistakes and nothing that follows from them.

mod ast;
mod attr;
mod check;
mod duration;
mod expand;

use proc_macro2::TokenStream;
use quote::quote;

use crate::ctxt::Ctxt;

/// The expansion of `#[idempotent(args)]` on `item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_for(args, item, false)
}

/// The expansion of `#[idem::actix::idempotent(args)]` on `item`: an actix-web handler.
pub(crate) fn expand_actix(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_for(args, item, true)
}

fn expand_for(args: TokenStream, item: TokenStream, actix: bool) -> TokenStream {
    let function: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => return not_a_function(item),
    };
    let cx = Ctxt::new();
    let args = attr::Args::parse(&cx, args);
    let plan = if args.malformed {
        None
    } else {
        check::plan(&cx, &args, &function, actix)
    };
    match (cx.check(), plan) {
        (Ok(()), Some(plan)) => {
            let tokens = expand::expand(&plan);
            if std::env::var_os("IDEM_MACROS_DEBUG").is_some() {
                eprintln!("#[idempotent] on `{}`:\n{tokens}", function.sig.ident);
            }
            tokens
        }
        (Err(errors), _) => {
            let errors = errors.into_compile_error();
            quote!(#errors #item)
        }
        (Ok(()), None) => unreachable!("check::plan returns None only after recording an error"),
    }
}

/// `item` is not a function (or does not parse as one): an error, unless it is a function
/// whose body does not parse, which rustc reports itself; the item as written either way.
fn not_a_function(item: TokenStream) -> TokenStream {
    match syn::parse2::<syn::Item>(item.clone()) {
        Ok(other) => {
            let error = syn::Error::new_spanned(
                &other,
                "`#[idempotent]` applies to an `async fn`: an axum handler, or a function given `store = ..`",
            )
            .into_compile_error();
            quote!(#error #item)
        }
        Err(_) => item,
    }
}
