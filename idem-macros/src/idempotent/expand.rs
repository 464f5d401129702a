//! Code generation. Cannot fail: everything was checked before.
//!
//! The signature is kept (an axum handler gains `IdemContext` as its first argument, in a
//! wrapper that names the handler, and returns a `Response`); the body is replaced by: the
//! handler's `static` config, the fingerprint (computed before the body runs, so a body that
//! mutates its input cannot change what was claimed), the key and the scope rendered into owned
//! locals (the body then moves the arguments freely), and the call into the runtime with the
//! original body as a future.
//!
//! The original body runs as `async move { let __idem_out: <return type> = <body>; __idem_out }`,
//! the "fake return edge": a type error in the body is reported at the user's code, against the
//! user's return type, and the return type is required to implement `IntoSnapshot` with a span
//! on it.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use super::ast::{Form, Key, Plan, Tonic};
use super::attr::{Contract, Scope, Source};
use crate::attr::tokens_text;
use crate::respan::{first_last, respan, spanned_ref};

pub(crate) fn expand(plan: &Plan<'_>) -> TokenStream {
    let krate = &plan.krate;
    let pv = quote!(#krate::__private);
    let item = plan.item;
    let attrs = item.attrs.iter().map(|attr| {
        // Inner attributes of the body (`#![allow(..)]`) apply to the function: keep them
        // as outer ones, the body is moved into a block.
        let mut attr = attr.clone();
        attr.style = syn::AttrStyle::Outer;
        attr
    });
    let vis = &item.vis;
    let mut sig = item.sig.clone();
    let ret_ty = return_type(&item.sig);
    let ret_span = return_span(&item.sig);

    let config = config(plan, &pv);
    let doc = handler_doc(plan, &pv);
    let hash = hash(plan, &pv);
    let (key_prelude, key_arg) = key(plan, &pv);
    let (scope_prelude, scope_arg) = scope(plan, &pv);
    let (tx_prelude, tx_bind) = transaction(plan, &pv, &mut sig);
    let body = body(item, &ret_ty, &tx_bind);

    let call = match &plan.form {
        Form::Axum => {
            // The context names its handler: a description read from the extractors (aide)
            // finds the handler's `HandlerDoc` by it.
            let function = item.sig.ident.unraw().to_string();
            sig.inputs.insert(
                0,
                syn::parse_quote!(
                    #pv::HandlerContext(__idem_cx): #pv::HandlerContext<
                        { #pv::handler_id(::core::module_path!(), #function) },
                    >
                ),
            );
            sig.output = syn::parse_quote_spanned!(ret_span=> -> #pv::Response);
            let (lookup_prelude, mode) = match (plan.contract, plan.lookup) {
                (Contract::LatestState, Some(lookup)) => (
                    quote_spanned!(lookup.span()=> let __idem_lookup = #lookup;),
                    quote!(#pv::Mode::latest(__idem_lookup)),
                ),
                _ => (quote!(), quote!(#pv::Mode::stored())),
            };
            let mode = if plan.transaction.is_some() {
                quote!(#mode.atomic(__idem_tx_hook))
            } else {
                mode
            };
            // Spanned on the return type: an `IntoSnapshot` it lacks is reported there.
            let run = respan(quote!(#pv::run::<#ret_ty, _, _>), ret_span);
            let call = at_return_type(
                ret_span,
                quote! {
                    __idem_cx,
                    #pv::Call {
                        config: &__IDEM_CONFIG,
                        key: #key_arg,
                        scope: #scope_arg,
                        hash: __idem_hash,
                    },
                    #mode,
                    #body
                },
            );
            quote! {
                #tx_prelude
                #lookup_prelude
                #run #call
            }
        }
        Form::Tonic(tonic) => return expand_tonic(plan, tonic, &pv),
        Form::Actix => {
            let ret = (&ret_ty, ret_span);
            let call = actix_call(plan, &pv, &mut sig, ret, &body, &key_arg, &scope_arg);
            quote!(#tx_prelude #call)
        }
        Form::Consumer { store } => {
            let as_idem = respan(quote!(#pv::AsIdem::as_idem), store.span());
            let store = spanned_ref(store);
            let run_once = respan(quote!(#pv::run_once), ret_span);
            let call = at_return_type(
                ret_span,
                quote! {
                    &__idem_store,
                    &__IDEM_CONFIG,
                    #key_arg,
                    #scope_arg,
                    __idem_hash,
                    #body
                },
            );
            quote! {
                let __idem_store: #pv::Idem = ::core::clone::Clone::clone(#as_idem(#store));
                #run_once #call
            }
        }
    };

    quote! {
        #(#attrs)*
        #vis #sig {
            #config
            #doc
            #hash
            #key_prelude
            #scope_prelude
            #call
        }
    }
}

/// A tonic method: its signature kept as written (or as `#[tonic::async_trait]` expanded it),
/// the request's metadata and extensions read and its message fingerprinted before the body
/// takes the request, the body run by the runtime as a future.
fn expand_tonic(plan: &Plan<'_>, tonic: &Tonic<'_>, pv: &TokenStream) -> TokenStream {
    let item = plan.item;
    let attrs = item.attrs.iter().map(|attr| {
        let mut attr = attr.clone();
        attr.style = syn::AttrStyle::Outer;
        attr
    });
    let vis = &item.vis;
    let sig = &item.sig;
    let output = tonic.output;
    let ret_span = output.span();
    let config = config(plan, pv);
    let hash = hash(plan, pv);
    let (key_prelude, key_arg) = key(plan, pv);
    let (scope_prelude, scope_arg) = scope(plan, pv);
    let request = tonic.name;
    let handle = match tonic.store {
        Some(store) => {
            let as_idem = respan(quote!(#pv::AsIdem::as_idem), store.span());
            let store = spanned_ref(store);
            quote!(#as_idem(#store))
        }
        None => {
            // Spanned on the method's name: a service that is no handle is reported there.
            let as_idem = respan(quote!(#pv::AsIdem::as_idem), sig.ident.span());
            let this = quote_spanned!(sig.ident.span()=> self);
            quote!(#as_idem(#this))
        }
    };
    // A response message without a business number is reported at its type.
    let response = tonic.response;
    let check_response = respan(quote!(#pv::grpc_message::<#response>), response.span());
    let (tx_prelude, tx_bind) = tonic_transaction(plan, pv);
    let body = if tonic.boxed {
        // `Box::pin(async move { .. })`, typed by `#[async_trait]` already; the transaction is
        // bound first thing inside its `async move` block.
        boxed_body(&item.block, &tx_bind)
    } else {
        body(item, &quote!(#output), &tx_bind)
    };
    let (lookup_prelude, mode) = mode(plan, pv);
    // Spanned on the return type: the run's bounds on the response message (reported first,
    // at the message itself, by `check_response`) are reported there too, not at the attribute.
    let mode = respan(mode, ret_span);
    let run = respan(quote!(#pv::grpc_run), ret_span);
    let call = quote! {
        #run(
            __idem_cx,
            #pv::Call {
                config: &__IDEM_CONFIG,
                key: #key_arg,
                scope: #scope_arg,
                hash: __idem_hash,
            },
            #mode,
            __idem_body,
        )
    };
    let tail = if tonic.boxed {
        quote!(::std::boxed::Box::pin(#call))
    } else {
        quote!(#call.await)
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            #config
            #check_response();
            let __idem_cx = #pv::GrpcContext::new(#handle, &#request);
            #hash
            #key_prelude
            #scope_prelude
            #lookup_prelude
            #tx_prelude
            let __idem_body = #body;
            #tail
        }
    }
}

/// The atomic mode of a tonic method (`transaction = tx`): the slot and hook, and the binding of
/// `tx` (an `idem::Tx<idem::AnySql>`, whatever the SQL store) at the start of the body.
fn tonic_transaction(plan: &Plan<'_>, pv: &TokenStream) -> (TokenStream, TokenStream) {
    let Some(name) = plan.tonic_transaction else {
        return (quote!(), quote!());
    };
    let krate = &plan.krate;
    let ty = quote_spanned!(name.span()=> #krate::Tx<#krate::AnySql>);
    let prelude = respan(
        quote! {
            let (__idem_tx_slot, __idem_tx_hook) = #pv::tx_slot::<#ty>();
        },
        name.span(),
    );
    let take = respan(quote!(#pv::take_tx::<#ty>(&__idem_tx_slot)), name.span());
    let bind = quote! {
        #[allow(unused_mut)]
        let mut #name: #ty = #take;
    };
    (prelude, bind)
}

/// The body `#[async_trait]` made, `Box::pin(async move { .. })`, as its `async move` block with
/// `bind` first in it; as it is when it has another shape (then nothing is bound).
fn boxed_body(block: &syn::Block, bind: &TokenStream) -> TokenStream {
    let mut block = block.clone();
    // `Box::pin(async move { .. })`: the `async move` block alone, with the transaction bound
    // first thing in it. The run's own future is boxed already: a second box would cost every
    // call an allocation, replays and rejections included, for a body they never run.
    let Some(syn::Stmt::Expr(last, None)) = block.stmts.last_mut().filter(|last| {
        matches!(last, syn::Stmt::Expr(syn::Expr::Call(call), None)
            if call.args.len() == 1
                && is_box_pin(&call.func)
                && matches!(call.args.first(), Some(syn::Expr::Async(_))))
    }) else {
        if bind.is_empty() {
            return quote!(#block);
        }
        return quote! {
            ::core::compile_error!("`transaction = ..` on this method: `#[idempotent]` cannot find the `Box::pin(async move { .. })` body that `#[tonic::async_trait]` makes; put `#[tonic::async_trait]` on the impl and `#[idempotent]` on the method, as written by hand")
        };
    };
    if let syn::Expr::Call(call) = last
        && let Some(arg) = call.args.pop()
    {
        *last = arg.into_value();
    }
    if let syn::Expr::Async(inner) = last {
        let stmts = core::mem::take(&mut inner.block.stmts);
        inner.block = syn::parse_quote!({ #bind #(#stmts)* });
    }
    quote!(#block)
}

/// `Box::pin`, `std::boxed::Box::pin`, `::std::boxed::Box::pin`, ...
fn is_box_pin(func: &syn::Expr) -> bool {
    let syn::Expr::Path(path) = func else {
        return false;
    };
    let mut segments = path.path.segments.iter().rev();
    matches!(
        (segments.next(), segments.next()),
        (Some(pin), Some(boxed)) if pin.ident == "pin" && boxed.ident == "Box"
    )
}

/// The early answer of a tonic method whose scope cannot be computed.
fn tonic_reject(plan: &Plan<'_>, pv: &TokenStream) -> TokenStream {
    let boxed = matches!(&plan.form, Form::Tonic(Tonic { boxed: true, .. }));
    let status = quote!(::core::result::Result::Err(#pv::grpc_status(&__idem_err, ::core::option::Option::None)));
    if boxed {
        quote!(return ::std::boxed::Box::pin(async move { #status });)
    } else {
        quote!(return #status;)
    }
}

/// The call of an actix-web handler: `IdemContext` first, `HttpResponse` returned, the
/// runtime's actix `run`.
fn actix_call(
    plan: &Plan<'_>,
    pv: &TokenStream,
    sig: &mut syn::Signature,
    (ret_ty, ret_span): (&TokenStream, Span),
    body: &TokenStream,
    key: &TokenStream,
    scope: &TokenStream,
) -> TokenStream {
    sig.inputs
        .insert(0, syn::parse_quote!(__idem_cx: #pv::actix::IdemContext));
    sig.output = syn::parse_quote_spanned!(ret_span=> -> #pv::actix::HttpResponse);
    let (lookup_prelude, mode) = mode(plan, pv);
    // Spanned on the return type: an `IntoSnapshot` it lacks is reported there.
    let run = respan(quote!(#pv::actix::run::<#ret_ty, _, _>), ret_span);
    let call = at_return_type(
        ret_span,
        quote! {
            __idem_cx,
            #pv::Call {
                config: &__IDEM_CONFIG,
                key: #key,
                scope: #scope,
                hash: __idem_hash,
            },
            #mode,
            #body
        },
    );
    quote! {
        #lookup_prelude
        #run #call
    }
}

/// The lookup's binding and the `Mode` of an HTTP handler: `latest_state` with its lookup, or
/// the stored record; the atomic mode on top with `transaction = ..`.
fn mode(plan: &Plan<'_>, pv: &TokenStream) -> (TokenStream, TokenStream) {
    let (lookup_prelude, mode) = match (plan.contract, plan.lookup) {
        (Contract::LatestState, Some(lookup)) => (
            quote_spanned!(lookup.span()=> let __idem_lookup = #lookup;),
            quote!(#pv::Mode::latest(__idem_lookup)),
        ),
        _ => (quote!(), quote!(#pv::Mode::stored())),
    };
    let mode = if plan.transaction.is_some() || plan.tonic_transaction.is_some() {
        quote!(#mode.atomic(__idem_tx_hook))
    } else {
        mode
    };
    (lookup_prelude, mode)
}

/// `(args).await`, the parentheses and `.await` spanned on the return type: the bounds of the
/// runtime function on the return type (`IntoSnapshot`, serde) are reported there, once.
fn at_return_type(ret_span: Span, args: TokenStream) -> TokenStream {
    let mut parens = Group::new(Delimiter::Parenthesis, args);
    parens.set_span(ret_span);
    let await_ = quote_spanned!(ret_span=> .await);
    let mut out: TokenStream = TokenTree::Group(parens).into();
    out.extend(await_);
    out
}

/// The declared return type, `()` if none.
fn return_type(sig: &syn::Signature) -> TokenStream {
    match &sig.output {
        syn::ReturnType::Type(_, ty) => quote!(#ty),
        syn::ReturnType::Default => quote_spanned!(sig.ident.span()=> ()),
    }
}

/// Where errors about the return type are reported: the type, or the function's name.
fn return_span(sig: &syn::Signature) -> Span {
    match &sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => sig.ident.span(),
    }
}

/// `static __IDEM_CONFIG: HandlerConfig = ..;`: the keys given, over the runtime's defaults
/// (`HandlerConfig::new`), checked at compile time by `HandlerConfig::assert_valid` — at the
/// duration the user wrote, if any, since a default cannot be wrong on its own.
fn config(plan: &Plan<'_>, pv: &TokenStream) -> TokenStream {
    // Without `operation = ".."` (axum handlers only; the checks require it elsewhere): the
    // request's method and matched route, which survive renaming or moving the function.
    let base = match plan.operation {
        Some(lit) => quote!(#pv::HandlerConfig::new(#lit)),
        // A tonic method: tonic's server keeps no method path in the request (its
        // `GrpcMethod` extension is the client's), so the default is the Rust method's path.
        None if matches!(plan.form, Form::Tonic(_)) => {
            let name = plan.item.sig.ident.unraw().to_string();
            quote!(#pv::HandlerConfig::new(::core::concat!(::core::module_path!(), "::", #name)))
        }
        None => quote!(#pv::HandlerConfig::for_route()),
    };
    let ttl = plan.ttl.map(|t| {
        let value = t.value.to_tokens(pv);
        quote!(.ttl(#value))
    });
    let lease = plan.lease.map(|l| {
        let value = l.value.to_tokens(pv);
        quote!(.lease(#value))
    });
    let timeout = plan.timeout.map(|t| {
        let value = t.value.to_tokens(pv);
        quote!(.timeout(#value))
    });
    let wait = plan.wait.map(|w| {
        let value = w.value.to_tokens(pv);
        quote!(.wait(#value))
    });
    let remember = plan.remember.map(|r| {
        let value = r.value.to_tokens(pv);
        quote!(.remember(#value))
    });
    let contract = match plan.contract {
        Contract::ExactReplay => quote!(ExactReplay),
        Contract::LatestState => quote!(LatestState),
        Contract::SuppressOnly => quote!(SuppressOnly),
    };
    let headers = plan.headers;
    let fail_open = plan.fail_open;
    let max = plan
        .max_snapshot_bytes
        .map(|expr| quote!(.max_snapshot_bytes(#expr)));
    let check_span = plan
        .lease
        .or(plan.ttl)
        .or(plan.remember)
        .or(plan.timeout)
        .map_or_else(Span::call_site, |l| l.lit.span());
    let check = quote_spanned! {check_span=>
        const _: () = __IDEM_CONFIG_VALUE.assert_valid();
    };
    quote! {
        const __IDEM_CONFIG_VALUE: #pv::HandlerConfig = #base
            #ttl
            #lease
            #timeout
            #wait
            #remember
            .contract(#pv::Contract::#contract)
            .replay_headers(&[#(#headers),*])
            .fail_open(#fail_open)
            #max;
        #check
        static __IDEM_CONFIG: #pv::HandlerConfig = __IDEM_CONFIG_VALUE;
    }
}

/// The handler's description for its API document (`idem::openapi::HandlerDoc`), registered
/// when the runtime's feature `openapi` is on: axum and actix-web handlers, whose operations an
/// OpenAPI document describes.
fn handler_doc(plan: &Plan<'_>, pv: &TokenStream) -> TokenStream {
    if !matches!(plan.form, Form::Axum | Form::Actix) {
        return quote!();
    }
    let function = plan.item.sig.ident.unraw().to_string();
    let operation = match plan.operation {
        Some(lit) => quote!(::core::option::Option::Some(#lit)),
        None => quote!(::core::option::Option::None),
    };
    let contract = match plan.contract {
        Contract::ExactReplay => quote!(ExactReplay),
        Contract::LatestState => quote!(LatestState),
        Contract::SuppressOnly => quote!(SuppressOnly),
    };
    let ttl = plan
        .ttl
        .map_or_else(|| quote!(#pv::DEFAULT_TTL), |t| t.value.to_tokens(pv));
    let remember = match plan.remember {
        Some(r) => {
            let value = r.value.to_tokens(pv);
            quote!(::core::option::Option::Some(#value))
        }
        None => quote!(::core::option::Option::None),
    };
    let key = match plan.key {
        Key::DefaultHeader => quote!(#pv::KeyDoc::Header("Idempotency-Key")),
        Key::Source(Source::Header { name, .. }) => quote!(#pv::KeyDoc::Header(#name)),
        Key::Source(Source::Expr(_)) => quote!(#pv::KeyDoc::Value),
    };
    let scope: Vec<String> = match &plan.scope {
        Scope::Global => Vec::new(),
        Scope::Default(_) => vec!["default".to_owned()],
        Scope::Parts(parts) => parts
            .iter()
            .map(|part| match part {
                Source::Header { name, .. } => format!("header({:?})", name.value()),
                Source::Expr(expr) => tokens_text(expr),
            })
            .collect(),
    };
    quote! {
        #pv::handler_doc! {
            function: #function,
            module: ::core::module_path!(),
            operation: #operation,
            contract: #pv::Contract::#contract,
            ttl: #ttl,
            remember: #remember,
            key: #key,
            scope: &[#(#scope),*],
        }
    }
}

/// `let __idem_hash = <T as Fingerprint>::fingerprint(..);`, or `fingerprint_fields` with the
/// mask of `fields!` (which reports an unknown or `env` field at the user's token).
fn hash(plan: &Plan<'_>, pv: &TokenStream) -> TokenStream {
    if !plan.inputs.is_empty() {
        return hash_inputs(plan, pv);
    }
    let ty = &plan.target.ty;
    let access = &plan.target.access;
    let value = match plan.fields {
        Some(fields) => {
            let f = respan(
                quote!(<#ty as #pv::Fingerprint>::fingerprint_fields),
                ty.span(),
            );
            let mask = crate::fields::expand(&plan.krate, ty, fields);
            quote!(#f(#access, #mask))
        }
        None => {
            let f = respan(quote!(<#ty as #pv::Fingerprint>::fingerprint), ty.span());
            quote!(#f(#access))
        }
    };
    quote! {
        let __idem_hash: #pv::RequestHash = #value;
    }
}

/// The hash of a handler that reads more than its target: the canonical object whose members
/// are the target and every input, each under its argument's name, in the byte order of the
/// names (`{"id":"pay_1","req":{..}}`).
fn hash_inputs(plan: &Plan<'_>, pv: &TokenStream) -> TokenStream {
    let ty = &plan.target.ty;
    let access = &plan.target.access;
    let target = match plan.fields {
        Some(fields) => {
            let f = respan(quote!(<#ty as #pv::Fingerprint>::write_fields), ty.span());
            let mask = crate::fields::expand(&plan.krate, ty, fields);
            quote!(#f(#access, __idem_w, #mask))
        }
        None => {
            let f = respan(quote!(<#ty as #pv::Canonical>::write_canonical), ty.span());
            quote!(#f(#access, __idem_w))
        }
    };
    let target_name = plan
        .target
        .name
        .as_ref()
        .map_or_else(String::new, |n| n.unraw().to_string());
    let mut members: Vec<(String, TokenStream)> = vec![(target_name, target)];
    for input in &plan.inputs {
        let access = &input.access;
        let write = match &input.ty {
            Some(ty) => {
                let f = respan(quote!(<#ty as #pv::Canonical>::write_canonical), ty.span());
                quote!(#f(#access, __idem_w))
            }
            None => quote!(#pv::Canonical::write_canonical(#access, __idem_w)),
        };
        members.push((input.name.unraw().to_string(), write));
    }
    members.sort_by(|a, b| a.0.cmp(&b.0));
    let members = members.iter().map(|(name, write)| {
        quote! {
            __idem_w.member(&mut __idem_first, #name);
            #write;
        }
    });
    quote! {
        let __idem_hash: #pv::RequestHash = #pv::RequestHash::of_canonical(|__idem_w| {
            let mut __idem_first = true;
            __idem_w.begin_object();
            #(#members)*
            __idem_w.end_object();
        });
    }
}

/// The statements that read the client key, and the argument passed to the runtime.
fn key(plan: &Plan<'_>, pv: &TokenStream) -> (TokenStream, TokenStream) {
    let consumer = matches!(plan.form, Form::Consumer { .. });
    let tonic = matches!(plan.form, Form::Tonic(_));
    match plan.key {
        Key::DefaultHeader if tonic => (
            quote!(),
            quote!(#pv::GrpcKeySource::Metadata("idempotency-key")),
        ),
        Key::Source(Source::Header { name, .. }) if tonic => {
            (quote!(), quote!(#pv::GrpcKeySource::Metadata(#name)))
        }
        Key::DefaultHeader => (quote!(), quote!(#pv::KeySource::Header("Idempotency-Key"))),
        Key::Source(Source::Header { name, .. }) => {
            (quote!(), quote!(#pv::KeySource::Header(#name)))
        }
        Key::Source(Source::Expr(expr)) => {
            let as_ref = respan(
                quote!(::core::convert::AsRef::<::core::primitive::str>::as_ref),
                expr.span(),
            );
            let value = spanned_ref(expr);
            let prelude = quote! {
                let __idem_key: ::std::string::String =
                    ::std::string::String::from(#as_ref(#value));
            };
            let arg = if consumer {
                quote!(&__idem_key)
            } else if tonic {
                quote!(#pv::GrpcKeySource::Value(&__idem_key))
            } else {
                quote!(#pv::KeySource::Value(&__idem_key))
            };
            (prelude, arg)
        }
    }
}

/// The statements that render the scope, and the `&[&dyn ScopePart]` passed to the runtime.
///
/// * `scope = [a, b]`: each part rendered into an owned `String` with its own `ScopePart` impl,
///   before the body moves the arguments it borrows (`String`'s impl writes its text as is, so
///   the key is the same as with the parts themselves);
/// * `scope = default`: the parts of the handle's default scope for this request; a request
///   without an identity (or a handle without a default scope) is answered at once;
/// * `scope = global`: no part.
fn scope(plan: &Plan<'_>, pv: &TokenStream) -> (TokenStream, TokenStream) {
    match plan.scope {
        Scope::Global => (quote!(), quote!(&[])),
        Scope::Default(word) => {
            let call = quote_spanned!(word.span()=> __idem_cx.default_scope());
            let reject = match plan.form {
                Form::Tonic(_) => tonic_reject(plan, pv),
                Form::Actix => {
                    quote!(return #pv::actix::ResponseError::error_response(&__idem_err);)
                }
                _ => quote!(return #pv::axum::response::IntoResponse::into_response(__idem_err);),
            };
            let prelude = quote! {
                let __idem_scope: ::std::vec::Vec<::std::string::String> = match #call {
                    ::core::result::Result::Ok(__idem_parts) => __idem_parts,
                    ::core::result::Result::Err(__idem_err) => {
                        #reject
                    }
                };
                let __idem_scope = #pv::scope_parts(&__idem_scope);
            };
            (prelude, quote!(&__idem_scope))
        }
        Scope::Parts(parts) => {
            let names: Vec<syn::Ident> = (0..parts.len())
                .map(|i| format_ident!("__idem_scope_{}", i))
                .collect();
            let renders = parts.iter().zip(&names).map(|(part, name)| {
                let value = match part {
                    Source::Header { name, call } if matches!(plan.form, Form::Tonic(_)) => {
                        let (first, _) = first_last(&call.to_token_stream());
                        quote_spanned!(first=> &__idem_cx.metadata(#name))
                    }
                    Source::Header { name, call } => {
                        let (first, _) = first_last(&call.to_token_stream());
                        quote_spanned!(first=> &__idem_cx.header(#name))
                    }
                    Source::Expr(expr) => spanned_ref(expr),
                };
                let write = respan(quote!(#pv::ScopePart::write_scope_part), part.span());
                quote! {
                    let #name: ::std::string::String = {
                        let mut __idem_part = ::std::string::String::new();
                        #write(#value, &mut __idem_part);
                        __idem_part
                    };
                }
            });
            let prelude = quote!(#(#renders)*);
            let arg = quote!(&[#(&#names as &dyn #pv::ScopePart),*]);
            (prelude, arg)
        }
    }
}

/// `async move { let __idem_out: R = BODY; __idem_out }`, the "fake return edge": the body's
/// block is checked against the declared return type `R` as a function body would be, so a
/// tail expression of another type is reported at that expression ("expected `R`"), and a
/// `return` in the body leaves the async block with its value, as it left the function.
///
/// In the atomic mode the body first binds the handler's `Tx` parameter (`tx_bind`); it is
/// dropped, handing the transaction back to the runtime, when the block has produced its value.
fn body(item: &syn::ItemFn, ret_ty: &TokenStream, tx_bind: &TokenStream) -> TokenStream {
    let block = &item.block;
    quote! {
        async move {
            #tx_bind
            let __idem_out: #ret_ty = #block;
            __idem_out
        }
    }
}

/// The atomic mode (`transaction = tx`): the `Tx` parameter leaves the signature (it is no
/// extractor); the prelude makes the slot the runtime begins the transaction into and the hook
/// it does so through, and the body binds the parameter's pattern from the slot. The type's
/// `TxParam` bound is spanned on the user's type.
fn transaction(
    plan: &Plan<'_>,
    pv: &TokenStream,
    sig: &mut syn::Signature,
) -> (TokenStream, TokenStream) {
    let Some(param) = plan.transaction else {
        return (quote!(), quote!());
    };
    sig.inputs = core::mem::take(&mut sig.inputs)
        .into_iter()
        .filter(|arg| !matches!(arg, syn::FnArg::Typed(t) if t == param))
        .collect();
    let (pat, ty) = (&param.pat, &param.ty);
    // Spanned on the user's type as a whole: a type that is no `Tx`, or a `Tx` of a store that
    // cannot do it, is reported there.
    let prelude = respan(
        quote! {
            let (__idem_tx_slot, __idem_tx_hook) = #pv::tx_slot::<#ty>();
        },
        ty.span(),
    );
    let take = respan(quote!(#pv::take_tx::<#ty>(&__idem_tx_slot)), ty.span());
    let bind = quote! {
        let #pat: #ty = #take;
    };
    (prelude, bind)
}
