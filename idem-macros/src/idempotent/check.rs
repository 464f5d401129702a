//! Checks across keys and the function, after parsing and before code generation; builds the
//! [`Plan`] the expansion follows. Everything that would make the endpoint silently wrong is a
//! compile error here, at the user's token.

use quote::ToTokens;
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use super::ast::{self, Form, Key, NotBound, Plan, Target, Tonic};
use super::attr::{Args, Contract, Scope, Source};
use crate::ctxt::Ctxt;

/// Checks `args` against `item`; the plan, if every part needed to build one is valid (errors
/// may have been recorded all the same: `cx.check()` decides). A key given with an invalid value
/// (`Some(None)`, its error recorded) is planned as if absent: with an error in `cx`, no plan is
/// expanded.
///
/// `actix`: the function is an actix-web handler (`idem::actix::idempotent`).
pub(crate) fn plan<'a>(
    cx: &Ctxt,
    args: &'a Args,
    item: &'a syn::ItemFn,
    actix: bool,
) -> Option<Plan<'a>> {
    let sig = &item.sig;
    let form = if actix {
        check_actix(cx, args, sig);
        Form::Actix
    } else {
        match (tonic_method(cx, args, sig), args.store.valid()) {
            (Some(tonic), _) => Form::Tonic(tonic?),
            (None, Some(store)) => Form::Consumer { store },
            (None, None) => Form::Axum,
        }
    };
    if !matches!(form, Form::Tonic(Tonic { boxed: true, .. })) {
        check_async(cx, sig);
    }
    match form {
        Form::Actix => check_actix_return_type(cx, sig),
        _ => check_return_type(cx, sig),
    }
    let contract = args.contract();
    match &form {
        Form::Axum => check_axum(cx, sig),
        Form::Actix => {}
        Form::Consumer { .. } => check_consumer(cx, args, sig),
        Form::Tonic(tonic) => check_tonic(cx, args, tonic),
    }
    check_lookup(cx, args, &form);
    check_durations(cx, args);
    let transaction = transaction(cx, args, sig, &form);
    let target = target(cx, args, sig, &form);
    let mut inputs = inputs(cx, args, sig, &form, target.as_ref());
    if let Form::Tonic(_) = form
        && args.operation.get().is_none()
    {
        // The default operation, `module::method`, is shared by two services' methods of one
        // name in one module: the service type is hashed with the message, so that one key
        // sent to both is a `422`, never the other's answer. (Put into the operation instead,
        // it would move every stored key to a new name on upgrade: a retry in flight then
        // ran again, under a new operation id; hashed, it is refused.)
        inputs.push(ast::Input {
            name: syn::Ident::new("service", proc_macro2::Span::call_site()),
            access: quote::quote!(::core::any::type_name::<Self>()),
            ty: None,
        });
    }

    let key = match args.key.get() {
        Some(Some(source)) => Key::Source(source),
        Some(None) => return None,
        None => Key::DefaultHeader,
    };
    let scope = match args.scope.get() {
        Some(Some(scope)) => scope,
        Some(None) => return None,
        None => {
            cx.syn_error(syn::Error::new(
                proc_macro2::Span::call_site(),
                match form {
                    Form::Axum | Form::Actix => "`#[idempotent]` needs a `scope`: who may share an idempotency key? Write `scope = [auth.tenant_id, auth.user_id]` with the caller's authenticated identity (an extractor argument), `scope = default` for the scope set once with `Idem::with_default_scope`, or `scope = global` if every caller shares the keys",
                    Form::Consumer { .. } => "`#[idempotent]` needs a `scope`: who may share an idempotency key? Write `scope = [msg.tenant_id]` with what separates the producers of the messages, or `scope = global` if every producer shares the keys",
                    Form::Tonic(_) => "`#[idempotent]` needs a `scope`: who may share an idempotency key? Write `scope = [header(\"x-tenant-id\")]` with the caller's identity from the request metadata (or an expression over `request.extensions()`, where an authenticating interceptor puts it), `scope = default` for the scope set once with `Idem::with_default_scope`, or `scope = global` if every caller shares the keys",
                },
            ));
            return None;
        }
    };
    let fields = match args.fingerprint.get() {
        Some(Some(fp)) => fp.fields.as_ref().map(|f| f.list.as_slice()),
        Some(None) => return None,
        None => None,
    };
    let tonic_transaction = match &form {
        Form::Tonic(_) => args.transaction.valid(),
        _ => None,
    };
    Some(Plan {
        item,
        form,
        contract,
        target: target?,
        inputs,
        fields,
        key,
        scope,
        ttl: args.ttl.valid(),
        lease: args.lease.valid(),
        timeout: args.timeout.valid(),
        wait: args.wait.valid(),
        remember: args.remember.valid(),
        operation: args.operation.valid(),
        headers: args.headers.valid().map_or(&[], Vec::as_slice),
        fail_open: args.fail_open.valid().copied().unwrap_or(false),
        max_snapshot_bytes: args.max_snapshot_bytes.valid(),
        lookup: args.lookup.valid(),
        transaction: match (args.transaction.valid(), transaction) {
            (Some(_), None) if tonic_transaction.is_none() => return None,
            (_, found) => found,
        },
        tonic_transaction,
        krate: args
            .krate
            .valid()
            .cloned()
            .unwrap_or_else(crate::fields::default_crate_path),
    })
}

fn check_async(cx: &Ctxt, sig: &syn::Signature) {
    if sig.asyncness.is_none() {
        cx.error_spanned_by(
            sig.fn_token,
            format!(
                "`#[idempotent]` needs an `async fn`: claiming the key and storing the response wait on the store; write `async fn {}(..)`",
                sig.ident.unraw()
            ),
        );
    }
}

fn check_return_type(cx: &Ctxt, sig: &syn::Signature) {
    if let syn::ReturnType::Type(_, ty) = &sig.output
        && let Some(opaque) = ast::find_impl_trait(ty)
    {
        cx.error_spanned_by(
            opaque,
            format!(
                "`#[idempotent]` stores the response and replays it, so it needs the response's type: `impl {}` hides it (and whether it carries a business number); name the type, as in `-> Result<(StatusCode, Json<Payment>), ApiError>`",
                crate::attr::tokens_text(&opaque.bounds)
            ),
        );
    }
}

/// The tonic form of `sig`, when it is a method (`&self`) whose output is `Result<Response<M>,
/// Status>` — as written (`async fn`) or as `#[tonic::async_trait]` expanded it (`fn` returning
/// `Pin<Box<dyn Future<Output = ..>>>`): `Some(None)` after an error.
fn tonic_method<'a>(
    cx: &Ctxt,
    args: &'a Args,
    sig: &'a syn::Signature,
) -> Option<Option<Tonic<'a>>> {
    sig.receiver()?;
    let syn::ReturnType::Type(_, declared) = &sig.output else {
        return None;
    };
    let (output, boxed) = match (sig.asyncness, ast::boxed_future_output(declared)) {
        (None, Some(output)) => (output, true),
        _ => (&**declared, false),
    };
    let response = ast::tonic_response(output)?;
    let found = typed_args(sig).find_map(|t| Some((t, ast::tonic_request(&t.ty)?)));
    let Some((request, message)) = found else {
        cx.error_spanned_by(
            &sig.ident,
            format!(
                "`{}` answers like a tonic method and takes no `tonic::Request<T>`: `#[idempotent]` fingerprints the request message and reads the key from its metadata; write `request: tonic::Request<CreatePayment>`",
                sig.ident.unraw()
            ),
        );
        return Some(None);
    };
    if ast::is_stream(message) || ast::is_stream(response) {
        let at = if ast::is_stream(message) {
            message
        } else {
            response
        };
        cx.error_spanned_by(
            at,
            "`#[idempotent]` applies to unary tonic methods only: a stream cannot be stored and replayed as one answer; make the method unary (one request message, one response message), or give each message of the stream its own key with `store = ..` on the function that handles it",
        );
        return Some(None);
    }
    let Some(name) =
        ast::bound_name(&request.pat).filter(|_| matches!(*request.pat, syn::Pat::Ident(_)))
    else {
        cx.error_spanned_by(
            &request.pat,
            "bind the request to a name, so that `#[idempotent]` can read its metadata and fingerprint its message before the body runs: write `request: tonic::Request<CreatePayment>`",
        );
        return Some(None);
    };
    Some(Some(Tonic {
        name,
        message,
        response,
        output,
        boxed,
        store: args.store.valid(),
    }))
}

fn check_tonic(cx: &Ctxt, args: &Args, tonic: &Tonic<'_>) {
    if let Some(arg) = args.fingerprint.valid().and_then(|fp| fp.arg.as_ref())
        && arg != tonic.name
    {
        cx.error_spanned_by(
            arg,
            format!(
                "a tonic method fingerprints its request message (`{}`): remove `arg = ..`, and choose the message's fields with `fingerprint(fields = [..])` or `#[fingerprint(env)]` on them",
                tonic.name.unraw()
            ),
        );
    }
}

/// The actix-web form: a free handler, and no `store` (the handle is the app data's).
fn check_actix(cx: &Ctxt, args: &Args, sig: &syn::Signature) {
    if let Some(receiver) = sig.receiver() {
        cx.error_spanned_by(
            receiver,
            "an actix-web handler takes no `self`: make it a free `async fn`, and register the `Idem` handle with `App::new().app_data(web::Data::new(idem))`",
        );
    }
    if let Some(store) = args.store.key_tokens() {
        cx.error_spanned_by(
            store,
            "`idem::actix::idempotent` makes an actix-web handler, whose `Idem` handle is the `web::Data<Idem>` app data: remove `store = ..`, or use `idem::idempotent` for a function outside HTTP",
        );
    }
}

fn check_actix_return_type(cx: &Ctxt, sig: &syn::Signature) {
    if let syn::ReturnType::Type(_, ty) = &sig.output
        && let Some(opaque) = ast::find_impl_trait(ty)
    {
        cx.error_spanned_by(
            opaque,
            format!(
                "`#[idempotent]` stores the response and replays it, so it needs the response's type: `impl {}` hides it (and whether it carries a business number); name the type, as in `-> Result<(web::Json<Payment>, StatusCode), Problem>`",
                crate::attr::tokens_text(&opaque.bounds)
            ),
        );
    }
}

fn check_axum(cx: &Ctxt, sig: &syn::Signature) {
    if let Some(receiver) = sig.receiver() {
        cx.error_spanned_by(
            receiver,
            "an axum handler takes no `self`: make it a free `async fn`, or give a method that is not a handler the store with `store = self.idem`",
        );
    }
}

fn check_consumer(cx: &Ctxt, args: &Args, sig: &syn::Signature) {
    let store_key = args.store.key_tokens();
    match &sig.output {
        syn::ReturnType::Type(_, ty) if ast::is_result(ty) => {}
        output => {
            let found = match output {
                syn::ReturnType::Type(_, ty) => format!("`{}`", crate::attr::tokens_text(ty)),
                syn::ReturnType::Default => "no return type".to_owned(),
            };
            let at = match output {
                syn::ReturnType::Type(_, ty) => ty.to_token_stream(),
                syn::ReturnType::Default => sig.ident.to_token_stream(),
            };
            cx.error_spanned_by(
                at,
                format!(
                    "a function with `store = ..` must return `Result<T, E>`, found {found}: a retry gets the stored `Result` back (`T` and `E` are stored with serde), and a conflict or an unavailable store is reported as `E::from(IdempotencyError)`"
                ),
            );
        }
    }
    match args.key.get() {
        None => cx.error_spanned_by(
            store_key,
            "a function with `store = ..` has no request headers to read the key from: name the key, as in `key = msg.id`",
        ),
        Some(Some(source @ Source::Header { .. })) => no_header(cx, source, "key = msg.id"),
        _ => {}
    }
    match args.scope.valid() {
        Some(Scope::Parts(parts)) => {
            for part in parts {
                no_header(cx, part, "scope = [msg.tenant_id]");
            }
        }
        Some(Scope::Default(word)) => cx.error_spanned_by(
            word,
            "`scope = default` takes the scope that `Idem::with_default_scope` computes from an HTTP request, and a function with `store = ..` has no request: write `scope = [msg.tenant_id]`, or `scope = global`",
        ),
        Some(Scope::Global) | None => {}
    }
    if !args.operation.is_given() {
        cx.error_spanned_by(
            store_key,
            format!(
                "a function with `store = ..` has no route to name its operation after, and its path changes when `{}` is renamed or moved (turning redeliveries after the deploy into new operations): name it, as in `operation = \"warehouse.ship\"`",
                sig.ident.unraw()
            ),
        );
    }
    if let Some(headers) = args.headers.key_tokens() {
        cx.error_spanned_by(
            headers,
            "`headers` chooses the response headers an HTTP handler replays; a function with `store = ..` replays its stored `Result`: remove `headers`",
        );
    }
    if let Some(contract) = args.contract.valid()
        && contract.value == Contract::LatestState
    {
        cx.error_spanned_by(
            &contract.lit,
            "`latest_state` renders the current state of an HTTP resource with `lookup`; a function with `store = ..` supports `exact_replay` (the stored `Result`, `Err` included) and `suppress_only`",
        );
    }
}

fn no_header(cx: &Ctxt, source: &Source, example: &str) {
    if let Source::Header { call, .. } = source {
        cx.error_spanned_by(
            call,
            format!(
                "`header(..)` reads a request header, and a function with `store = ..` has no request: write an expression, as in `{example}`"
            ),
        );
    }
}

fn check_lookup(cx: &Ctxt, args: &Args, form: &Form<'_>) {
    let latest = args
        .contract
        .valid()
        .filter(|c| c.value == Contract::LatestState);
    match (latest, args.lookup.key_tokens()) {
        (Some(contract), None) if matches!(form, Form::Axum | Form::Actix | Form::Tonic(_)) => cx.error_spanned_by(
            &contract.lit,
            "`latest_state` answers a retry with the current state of what the first request created, so it needs a `lookup`: add `lookup = find_payment`, an `async fn(String) -> impl IntoResponse` that renders it from the business number",
        ),
        // An invalid contract is its own error; `lookup` may be right.
        (None, Some(lookup)) if args.contract.get().is_none_or(Option::is_some) => {
            cx.error_spanned_by(
                lookup,
                "`lookup` renders the current state for `contract = \"latest_state\"` only: add that contract, or remove `lookup`",
            );
        }
        _ => {}
    }
}

/// The lease shorter than the ttl, when both are given. With one of them left to the runtime's
/// default, the generated code checks it at compile time (`HandlerConfig::assert_valid` in a
/// constant), so that the defaults live in one place, the runtime.
fn check_durations(cx: &Ctxt, args: &Args) {
    if let (Some(ttl), Some(remember)) = (args.ttl.valid(), args.remember.valid())
        && remember.value <= ttl.value
    {
        let (ttl_text, remember_text) = (ttl.value.display(), remember.value.display());
        cx.error_spanned_by(
            &remember.lit,
            format!(
                "`remember` (`{remember_text}`) must be longer than the ttl (`{ttl_text}`): it keeps the key known after its response expires at the ttl; lengthen `remember` (e.g. `remember = \"1y\"`), or leave it out"
            ),
        );
    }
    let (Some(ttl), Some(lease)) = (args.ttl.valid(), args.lease.valid()) else {
        return;
    };
    if lease.value >= ttl.value {
        let (ttl_text, lease_text) = (ttl.value.display(), lease.value.display());
        cx.error_spanned_by(
            &lease.lit,
            format!(
                "the lease (`{lease_text}`) must be shorter than the ttl (`{ttl_text}`): the lease bounds how long a crashed attempt blocks retries, the ttl how long retries are recognized; shorten `lease` or lengthen `ttl`"
            ),
        );
    }
}

/// The parameter named by `transaction = tx` (the atomic mode), checked against the form and
/// `fail_open`; without the key, a parameter written `Tx<S>` is an error (it is no extractor:
/// only the atomic mode can give it a value).
fn transaction<'a>(
    cx: &Ctxt,
    args: &Args,
    sig: &'a syn::Signature,
    form: &Form<'_>,
) -> Option<&'a syn::PatType> {
    let typed = || typed_args(sig);
    let Some(name) = args.transaction.valid() else {
        if !args.transaction.is_given() {
            for t in typed().filter(|t| ast::looks_like_tx(&t.ty)) {
                cx.error_spanned_by(
                    &t.ty,
                    "a `Tx` parameter is the transaction of the atomic mode, begun by `#[idempotent]` after the claim and committed with the stored result: name it in the attribute, as in `#[idempotent(transaction = tx, ..)]`, or take a transaction of your own from your pool",
                );
            }
        }
        return None;
    };
    if let Form::Consumer { .. } = form {
        cx.error_spanned_by(
            name,
            "`transaction = ..` is the atomic mode of axum handlers; a function with `store = ..` stores its result after it returns: write its rows in a transaction of your own, keyed on `idem::operation_id()`",
        );
        return None;
    }
    if let Some(open) = args.fail_open.key_tokens()
        && args.fail_open.valid().copied().unwrap_or(false)
    {
        cx.error_spanned_by(
            open,
            "`fail_open` runs the handler without the store when the store is unreachable, and `transaction = ..` begins the handler's transaction on the store's own database: remove `fail_open`",
        );
    }
    if let Form::Tonic(_) = form {
        // A tonic method's parameters are fixed by its trait: the transaction is a binding of
        // the body, not a parameter (`Plan::tonic_transaction`).
        return None;
    }
    let found = typed().find(|t| match &*t.pat {
        syn::Pat::Ident(p) => p.subpat.is_none() && p.ident == *name,
        _ => false,
    });
    if found.is_none() {
        cx.error_spanned_by(
            name,
            format!(
                "`{}` has no parameter `{}`: `transaction = {}` names the handler's transaction, as in `mut {}: idem::Tx<PostgresStore>` (or `MySqlStore`, `SqliteStore`, `AnySql`)",
                sig.ident.unraw(),
                name.unraw(),
                name.unraw(),
                name.unraw(),
            ),
        );
    }
    found
}

/// The argument fingerprinted: `fingerprint(arg = name)`, else the `Json<T>` body (axum) or the
/// first argument (`store = ..`).
fn target(cx: &Ctxt, args: &Args, sig: &syn::Signature, form: &Form<'_>) -> Option<Target> {
    if let Form::Tonic(tonic) = form {
        let name = tonic.name;
        return Some(Target {
            ty: tonic.message.clone(),
            access: quote::quote!(#name.get_ref()),
            name: Some(syn::Ident::new("message", name.span())),
        });
    }
    let chosen = target_arg(cx, args, sig, form)?;
    match ast::target_of(&chosen.pat, &chosen.ty) {
        Ok(target) => Some(target),
        Err(NotBound::Pattern) => {
            cx.error_spanned_by(
                &chosen.pat,
                "bind the fingerprinted argument to a name, so that `#[idempotent]` can hash it before the body runs: write `Json(req): Json<CreatePayment>` or `msg: Message`",
            );
            None
        }
        Err(NotBound::Type) => {
            cx.syn_error(syn::Error::new(
                chosen.ty.span(),
                format!(
                    "cannot see the type of `{}` in `{}`: write `Json(req): Json<CreatePayment>`, or bind the whole argument (`msg: Message`)",
                    ast::bound_name(&chosen.pat).map(|n| n.unraw().to_string()).unwrap_or_default(),
                    crate::attr::tokens_text(&chosen.ty)
                ),
            ));
            None
        }
    }
}

/// The argument whose value identifies the operation: named by `fingerprint(arg = ..)`, else
/// the JSON body of a handler, or a consumer's message.
fn target_arg<'s>(
    cx: &Ctxt,
    args: &Args,
    sig: &'s syn::Signature,
    form: &Form<'_>,
) -> Option<&'s syn::PatType> {
    let typed = || typed_args(sig);
    let explicit = args.fingerprint.valid().and_then(|fp| fp.arg.as_ref());
    if let Some(name) = explicit {
        let found = typed().find(|t| ast::bound_name(&t.pat) == Some(name));
        if found.is_none() {
            let names: Vec<String> = typed()
                .filter_map(|t| ast::bound_name(&t.pat))
                .map(|n| format!("`{}`", n.unraw()))
                .collect();
            let known = if names.is_empty() {
                "it binds no argument to a single name".to_owned()
            } else {
                format!("it binds {}", names.join(", "))
            };
            cx.error_spanned_by(
                name,
                format!(
                    "`{}` has no argument `{}` to fingerprint: {known} (`Json(req): Json<T>` binds `req`)",
                    sig.ident.unraw(),
                    name.unraw()
                ),
            );
        }
        found
    } else {
        match form {
            Form::Tonic(_) => unreachable!("a tonic method's target is its request"),
            Form::Actix => {
                let found = typed().find(|t| ast::json_inner(&t.ty).is_some());
                if found.is_none() {
                    cx.error_spanned_by(
                        &sig.ident,
                        format!(
                            "`{}` has no `web::Json<T>` argument for `#[idempotent]` to fingerprint: name the argument whose value identifies the operation with `fingerprint(arg = name)`, e.g. a path parameter (`path: web::Path<Uuid>` and `fingerprint(arg = path)`); its type must implement `idem::Fingerprint`",
                            sig.ident.unraw()
                        ),
                    );
                }
                found
            }
            Form::Axum => {
                let found = typed().find(|t| ast::json_inner(&t.ty).is_some());
                if found.is_none() {
                    cx.error_spanned_by(
                        &sig.ident,
                        format!(
                            "`{}` has no `Json<T>` argument for `#[idempotent]` to fingerprint: name the argument whose value identifies the operation with `fingerprint(arg = name)`, e.g. a path parameter (`Path(id): Path<Uuid>` and `fingerprint(arg = id)`); its type must implement `idem::Fingerprint`",
                            sig.ident.unraw()
                        ),
                    );
                }
                found
            }
            Form::Consumer { store } => {
                // `store = idem` (or `ctx.idem`) names the handle, not the message.
                let handle = root_ident(store);
                let found = typed().find(|t| handle.is_none() || ast::bound_name(&t.pat) != handle);
                if found.is_none() {
                    cx.error_spanned_by(
                        &sig.ident,
                        format!(
                            "`{}` has no argument for `#[idempotent]` to fingerprint: a function with `store = ..` fingerprints its first argument (other than the store's), or the one named by `fingerprint(arg = name)`",
                            sig.ident.unraw()
                        ),
                    );
                }
                found
            }
        }
    }
}

/// The arguments hashed beside the target, sorted by name, for an axum or actix-web handler:
/// every argument is decided at compile time (`docs/http.md`, "What counts as the same
/// request"). Path parameters, the query, the URI and a form body are hashed unless they are in
/// the scope or `fingerprint(skip = [..])`; headers and the whole request must be in the scope,
/// in `with` or in `skip`; anything else (state, extensions, the caller's own extractors) only
/// when named in `with`.
fn inputs(
    cx: &Ctxt,
    args: &Args,
    sig: &syn::Signature,
    form: &Form<'_>,
    target: Option<&Target>,
) -> Vec<ast::Input> {
    let fp = args.fingerprint.valid();
    let with = fp.map_or(&[][..], |fp| fp.with.as_slice());
    let skip = fp.map_or(&[][..], |fp| fp.skip.as_slice());
    let web = matches!(form, Form::Axum | Form::Actix);
    if !web {
        for name in with.iter().chain(skip) {
            cx.error_spanned_by(
                name,
                "`with` and `skip` decide what an HTTP handler's other arguments are to the fingerprint; here the request is the one value hashed: remove it",
            );
        }
        return Vec::new();
    }
    // Arguments whole in the key or the scope: a different value is a different key already.
    // One field of an argument (`scope = [p.account]`) leaves its other fields to the hash.
    let mut scoped: Vec<&syn::Ident> = match args.scope.valid() {
        Some(Scope::Parts(parts)) => parts
            .iter()
            .filter_map(|part| match part {
                Source::Expr(expr) => whole_value(expr),
                Source::Header { .. } => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if let Some(Source::Expr(expr)) = args.key.valid() {
        scoped.extend(whole_value(expr));
    }
    let target_name = target.and_then(|t| t.name.as_ref());
    let tx = args.transaction.valid();
    for name in with.iter().chain(skip) {
        let known = typed_args(sig).any(|t| ast::bound_name(&t.pat) == Some(name));
        if !known {
            cx.error_spanned_by(
                name,
                format!(
                    "`{}` has no argument `{}`: `with` and `skip` name arguments of the handler",
                    sig.ident.unraw(),
                    name.unraw()
                ),
            );
        } else if Some(name) == target_name {
            cx.error_spanned_by(
                name,
                format!(
                    "`{}` is the request `#[idempotent]` fingerprints already: remove it",
                    name.unraw()
                ),
            );
        } else if with.contains(name) && skip.contains(name) {
            cx.error_spanned_by(
                name,
                format!(
                    "`{}` is in both `with` and `skip`: keep it in one",
                    name.unraw()
                ),
            );
        }
    }
    let mut inputs = Vec::new();
    for arg in typed_args(sig) {
        let name = ast::bound_name(&arg.pat);
        if name.is_some() && (name == target_name || name == tx) {
            continue;
        }
        let kind = ast::arg_kind(&arg.ty, matches!(form, Form::Actix));
        let named = |list: &[syn::Ident]| name.is_some_and(|n| list.contains(n));
        let decided = named(with) || named(skip) || name.is_some_and(|n| scoped.contains(&n));
        let hashed = named(with) || (kind == ast::ArgKind::Request && !decided);
        if kind == ast::ArgKind::Wrapped && !decided {
            let what = crate::attr::tokens_text(&arg.ty);
            let n = name.map_or_else(|| "arg".to_owned(), |n| n.unraw().to_string());
            cx.error_spanned_by(
                &arg.pat,
                format!(
                    "`#[idempotent]` cannot hash `{what}` as it is, and what it holds may change what `{}` does: take the extractor itself (`Query<T>`, hashed with the body), put the value in the scope, or write `fingerprint(skip = [{n}])` if it changes nothing",
                    sig.ident.unraw()
                ),
            );
            continue;
        }
        if kind == ast::ArgKind::Headers && !decided {
            let what = crate::attr::tokens_text(&arg.ty);
            match name {
                Some(name) => cx.error_spanned_by(
                    &arg.pat,
                    format!(
                        "`#[idempotent]` cannot tell what of `{what}` changes what `{f}` does (headers also carry values that change between retries: dates, signatures, trace ids): put the header that matters in the scope, as in `scope = [.., header(\"X-Region\")]`, or write `fingerprint(skip = [{n}])` if `{f}` does nothing different by them",
                        f = sig.ident.unraw(),
                        n = name.unraw()
                    ),
                ),
                None => cx.error_spanned_by(
                    &arg.pat,
                    format!(
                        "`#[idempotent]` cannot tell what of `{what}` changes what `{}` does: put the header that matters in the scope, as in `scope = [.., header(\"X-Region\")]`, or bind the argument to a name (`headers: {what}`) and write `fingerprint(skip = [headers])` if the handler does nothing different by them",
                        sig.ident.unraw()
                    ),
                ),
            }
            continue;
        }
        if !hashed {
            continue;
        }
        match ast::input_of(&arg.pat, &arg.ty) {
            Some(input) => inputs.push(input),
            None => cx.error_spanned_by(
                &arg.pat,
                format!(
                    "`#[idempotent]` hashes `{}` with the request, since a retry sends it again and it may change what the handler does: bind it to a name (`Path(id): Path<String>`), or put it in the scope",
                    crate::attr::tokens_text(&arg.ty)
                ),
            ),
        }
    }
    inputs.sort_by_key(|a| a.name.unraw().to_string());
    inputs
}

/// The arguments of `sig` other than `self`.
fn typed_args(sig: &syn::Signature) -> impl Iterator<Item = &syn::PatType> {
    sig.inputs.iter().filter_map(|arg| match arg {
        syn::FnArg::Typed(t) => Some(t),
        syn::FnArg::Receiver(_) => None,
    })
}

/// The variable an expression is the whole value of: `id` of `id`, `&id`, `*id`, `id.as_str()`,
/// `id.clone()`, `id.to_string()` — not of `id.account` or `id.account()`, a part of it.
fn whole_value(expr: &syn::Expr) -> Option<&syn::Ident> {
    match expr {
        syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        syn::Expr::Reference(r) => whole_value(&r.expr),
        syn::Expr::Paren(p) => whole_value(&p.expr),
        syn::Expr::Group(g) => whole_value(&g.expr),
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => whole_value(&u.expr),
        syn::Expr::MethodCall(m)
            if m.args.is_empty()
                && [
                    "as_str",
                    "as_ref",
                    "as_deref",
                    "clone",
                    "to_string",
                    "to_owned",
                    "deref",
                ]
                .iter()
                .any(|name| m.method == name) =>
        {
            whole_value(&m.receiver)
        }
        _ => None,
    }
}

/// The variable an expression starts from: `idem` of `idem`, `ctx.idem`, `&ctx.idem()`.
fn root_ident(expr: &syn::Expr) -> Option<&syn::Ident> {
    match expr {
        syn::Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        syn::Expr::Field(f) => root_ident(&f.base),
        syn::Expr::MethodCall(m) => root_ident(&m.receiver),
        syn::Expr::Reference(r) => root_ident(&r.expr),
        syn::Expr::Paren(p) => root_ident(&p.expr),
        syn::Expr::Group(g) => root_ident(&g.expr),
        syn::Expr::Unary(u) => root_ident(&u.expr),
        _ => None,
    }
}
