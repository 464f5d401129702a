//! The arguments of `#[idempotent(..)]`, parsed strictly: every key is known, given once, and
//! well-formed, or it is an error at the user's token that says what to write instead. A
//! malformed value does not stop the parse: the next key is read, so that every mistake is
//! reported at once.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Token};

use super::duration::{self, Millis};
use crate::attr::{Attr, parse_crate_value, skip_to_comma, tokens_text};
use crate::ctxt::Ctxt;
use crate::symbol::*;

/// The keys, in the order `expected one of ..` lists them, each with how it is written.
const KEYS: &[(Symbol, &str)] = &[
    (KEY, "key = header(\"Idempotency-Key\")"),
    (SCOPE, "scope = [auth.tenant_id, auth.user_id]"),
    (FINGERPRINT, "fingerprint(fields = [amount, currency])"),
    (TTL, "ttl = \"7d\""),
    (LEASE, "lease = \"30s\""),
    (TIMEOUT, "timeout = \"2m\""),
    (WAIT, "wait = \"2s\""),
    (REMEMBER, "remember = \"1y\""),
    (CONTRACT, "contract = \"exact_replay\""),
    (LOOKUP, "lookup = find_payment"),
    (STORE, "store = self.idem"),
    (OPERATION, "operation = \"payments.create\""),
    (HEADERS, "headers = [\"x-request-cost\"]"),
    (FAIL_OPEN, "fail_open"),
    (MAX_SNAPSHOT_BYTES, "max_snapshot_bytes = 65536"),
    (TRANSACTION, "transaction = tx"),
    (CRATE, "crate = \"::idem\""),
];

const WHAT: &str = "idempotent";

/// What a replay returns (contract S2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Contract {
    ExactReplay,
    LatestState,
    SuppressOnly,
}

const CONTRACTS: &[(&str, Contract)] = &[
    ("exact_replay", Contract::ExactReplay),
    ("latest_state", Contract::LatestState),
    ("suppress_only", Contract::SuppressOnly),
];

/// Where the client key, or one part of the scope, comes from.
pub(crate) enum Source {
    /// `header("Name")`: a request header (axum handlers only).
    Header { call: syn::ExprCall, name: LitStr },
    /// Any other expression, evaluated in the function before its body runs.
    Expr(syn::Expr),
}

/// `scope = ..`: who shares a key space.
pub(crate) enum Scope {
    /// `scope = [a, b]`: the parts, evaluated per request.
    Parts(Vec<Source>),
    /// `scope = global`: every caller shares the keys.
    Global,
    /// `scope = default`: the `Idem` handle's default scope (axum handlers).
    Default(Ident),
}

/// `fingerprint(arg = name, fields = [a, b], with = [c], skip = [d])`.
pub(crate) struct FingerprintArg {
    pub(crate) arg: Option<Ident>,
    pub(crate) fields: Option<FieldList>,
    /// Arguments hashed beside the target (`with = [region]`).
    pub(crate) with: Vec<Ident>,
    /// Arguments declared not to change what the operation does (`skip = [trace]`).
    pub(crate) skip: Vec<Ident>,
}

/// `fields = [a, b]`.
pub(crate) struct FieldList {
    pub(crate) list: Vec<Ident>,
}

/// A string with its parsed value: `ttl = "7d"`, `contract = "exact_replay"`.
pub(crate) struct Lit<T> {
    pub(crate) lit: LitStr,
    pub(crate) value: T,
}

/// Every key of `#[idempotent(..)]`. A key given with an invalid value holds `Some(None)`: it
/// counts as given (a second one is a duplicate) and checks on its value stay quiet.
pub(crate) struct Args {
    pub(crate) key: Attr<Option<Source>>,
    pub(crate) scope: Attr<Option<Scope>>,
    pub(crate) fingerprint: Attr<Option<FingerprintArg>>,
    pub(crate) ttl: Attr<Option<Lit<Millis>>>,
    pub(crate) lease: Attr<Option<Lit<Millis>>>,
    pub(crate) timeout: Attr<Option<Lit<Millis>>>,
    pub(crate) wait: Attr<Option<Lit<Millis>>>,
    pub(crate) remember: Attr<Option<Lit<Millis>>>,
    pub(crate) contract: Attr<Option<Lit<Contract>>>,
    pub(crate) lookup: Attr<Option<syn::Expr>>,
    pub(crate) store: Attr<Option<syn::Expr>>,
    pub(crate) operation: Attr<Option<LitStr>>,
    /// Lowercase header names.
    pub(crate) headers: Attr<Option<Vec<String>>>,
    pub(crate) fail_open: Attr<Option<bool>>,
    pub(crate) max_snapshot_bytes: Attr<Option<syn::Expr>>,
    /// `transaction = tx`: the atomic mode, with the handler's `Tx` parameter.
    pub(crate) transaction: Attr<Option<Ident>>,
    pub(crate) krate: Attr<Option<syn::Path>>,
    /// A key or value did not parse (already reported): which keys were meant is unknown, so
    /// the checks across keys stay quiet rather than report consequences of that mistake.
    pub(crate) malformed: bool,
}

impl Args {
    /// Parses `tokens`, the inside of `#[idempotent(..)]`, recording every mistake in `cx`.
    pub(crate) fn parse(cx: &Ctxt, tokens: TokenStream) -> Args {
        let mut args = Args {
            key: Attr::none(WHAT, KEY),
            scope: Attr::none(WHAT, SCOPE),
            fingerprint: Attr::none(WHAT, FINGERPRINT),
            ttl: Attr::none(WHAT, TTL),
            lease: Attr::none(WHAT, LEASE),
            timeout: Attr::none(WHAT, TIMEOUT),
            wait: Attr::none(WHAT, WAIT),
            remember: Attr::none(WHAT, REMEMBER),
            contract: Attr::none(WHAT, CONTRACT),
            lookup: Attr::none(WHAT, LOOKUP),
            store: Attr::none(WHAT, STORE),
            operation: Attr::none(WHAT, OPERATION),
            headers: Attr::none(WHAT, HEADERS),
            fail_open: Attr::none(WHAT, FAIL_OPEN),
            max_snapshot_bytes: Attr::none(WHAT, MAX_SNAPSHOT_BYTES),
            transaction: Attr::none(WHAT, TRANSACTION),
            krate: Attr::none(WHAT, CRATE),
            malformed: false,
        };
        let mut malformed = false;
        let parser = |input: ParseStream<'_>| {
            while !input.is_empty() {
                if !input.peek(Ident::peek_any) {
                    return Err(input.error(format!(
                        "expected a key, as in `#[idempotent(key = header(\"Idempotency-Key\"), ttl = \"7d\")]`: {}",
                        expected_keys()
                    )));
                }
                let key = input.call(Ident::parse_any)?;
                if let Err(err) = args.parse_key(cx, &key, input) {
                    cx.syn_error(err);
                    malformed = true;
                    skip_to_comma(input)?;
                }
                if input.is_empty() {
                    break;
                }
                if !input.peek(Token![,]) {
                    return Err(input.error("expected `,` between two keys of `#[idempotent(..)]`"));
                }
                input.parse::<Token![,]>()?;
            }
            Ok(())
        };
        if let Err(err) = parser.parse2(tokens) {
            cx.syn_error(err);
            malformed = true;
        }
        args.malformed = malformed;
        args
    }

    fn parse_key(&mut self, cx: &Ctxt, key: &Ident, input: ParseStream<'_>) -> syn::Result<()> {
        let Some(&(symbol, example)) = KEYS.iter().find(|(s, _)| key == s) else {
            cx.error_spanned_by(
                key,
                format!(
                    "unknown idempotent attribute `{}`: {}",
                    key.unraw(),
                    expected_keys()
                ),
            );
            return skip_to_comma(input);
        };
        if symbol == FINGERPRINT {
            let value = parse_fingerprint(cx, key, input)?;
            self.fingerprint.set(cx, key, value);
            return Ok(());
        }
        if symbol == FAIL_OPEN {
            let value = if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                let lit: syn::LitBool = input.parse().map_err(|err| {
                    syn::Error::new(
                        err.span(),
                        "write `fail_open` (or `fail_open = true`), or leave it out to fail closed",
                    )
                })?;
                lit.value
            } else {
                true
            };
            self.fail_open.set(cx, key, Some(value));
            return Ok(());
        }
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("`{symbol}` needs a value: write `{example}`"),
            ));
        }
        input.parse::<Token![=]>()?;
        match symbol {
            s if s == KEY => {
                let expr: syn::Expr = input.parse()?;
                let value = source(cx, expr);
                self.key.set(cx, key, value);
            }
            s if s == SCOPE => {
                let value = parse_scope(cx, input)?;
                self.scope.set(cx, key, value);
            }
            s if s == TTL || s == LEASE || s == TIMEOUT || s == WAIT || s == REMEMBER => {
                let value = parse_duration(cx, symbol, input)?;
                let attr = if s == TTL {
                    &mut self.ttl
                } else if s == LEASE {
                    &mut self.lease
                } else if s == WAIT {
                    &mut self.wait
                } else if s == REMEMBER {
                    &mut self.remember
                } else {
                    &mut self.timeout
                };
                attr.set(cx, key, value);
            }
            s if s == CONTRACT => {
                let value = parse_contract(cx, input)?;
                self.contract.set(cx, key, value);
            }
            s if s == LOOKUP => {
                let expr = input.parse()?;
                self.lookup.set(cx, key, Some(expr));
            }
            s if s == STORE => {
                let expr = input.parse()?;
                self.store.set(cx, key, Some(expr));
            }
            s if s == OPERATION => {
                let value = parse_operation(cx, input)?;
                self.operation.set(cx, key, value);
            }
            s if s == HEADERS => {
                let value = parse_headers(cx, input)?;
                self.headers.set(cx, key, value);
            }
            s if s == MAX_SNAPSHOT_BYTES => {
                let value = parse_max_bytes(cx, input)?;
                self.max_snapshot_bytes.set(cx, key, value);
            }
            s if s == TRANSACTION => {
                let name = input.call(Ident::parse_any).map_err(|err| {
                    syn::Error::new(
                        err.span(),
                        "`transaction` names the handler's transaction parameter: write `transaction = tx`, with `mut tx: idem::Tx<PostgresStore>` among the handler's arguments",
                    )
                })?;
                self.transaction.set(cx, key, Some(name));
            }
            s if s == CRATE => {
                let value = parse_crate_value(cx, input, "#[idempotent(crate = \"::idem\")]")?;
                self.krate.set(cx, key, value);
            }
            _ => unreachable!("`fingerprint` and `fail_open` are parsed above"),
        }
        Ok(())
    }

    /// The contract, `exact_replay` unless given (and valid).
    pub(crate) fn contract(&self) -> Contract {
        self.contract
            .valid()
            .map_or(Contract::ExactReplay, |c| c.value)
    }
}

fn expected_keys() -> String {
    let names: Vec<String> = KEYS.iter().map(|(s, _)| format!("`{s}`")).collect();
    format!("expected one of {}", names.join(", "))
}

/// `header("Name")` or another expression.
fn source(cx: &Ctxt, expr: syn::Expr) -> Option<Source> {
    let syn::Expr::Call(call) = &expr else {
        return Some(Source::Expr(expr));
    };
    let syn::Expr::Path(func) = &*call.func else {
        return Some(Source::Expr(expr));
    };
    if func.path != HEADER {
        return Some(Source::Expr(expr));
    }
    let name = match call.args.first() {
        Some(syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        })) if call.args.len() == 1 => lit.clone(),
        _ => {
            let at = if call.args.is_empty() {
                call.to_token_stream()
            } else {
                call.args.to_token_stream()
            };
            cx.error_spanned_by(
                at,
                "`header(..)` takes the header's name as one string literal, as in `header(\"Idempotency-Key\")`",
            );
            return None;
        }
    };
    if !is_header_name(&name.value()) {
        cx.error_spanned_by(&name, invalid_header_name(&name.value()));
        return None;
    }
    Some(Source::Header {
        call: call.clone(),
        name,
    })
}

/// A `token` of RFC 9110: the characters a header name may have.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn invalid_header_name(name: &str) -> String {
    format!("`{name}` is not a header name: use letters, digits and `-`, as in `Idempotency-Key`")
}

/// `[a, b, header("X-Tenant-Id")]`.
fn parse_scope(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<Scope>> {
    if input.peek(Ident::peek_any) && (input.peek2(Token![,]) || input.peek2(syn::parse::End)) {
        let word = input.call(Ident::parse_any)?;
        if word == GLOBAL {
            return Ok(Some(Scope::Global));
        }
        if word == DEFAULT {
            return Ok(Some(Scope::Default(word)));
        }
        cx.error_spanned_by(
            &word,
            format!(
                "write the scope as a list, as in `scope = [{}]`, or `scope = default` (the scope set with `Idem::with_default_scope`), or `scope = global` (every caller shares the keys)",
                word.unraw()
            ),
        );
        return Ok(None);
    }
    if !input.peek(syn::token::Bracket) {
        let value: syn::Expr = input.parse()?;
        cx.error_spanned_by(
            &value,
            format!(
                "write the scope as a list, as in `scope = [{}]`",
                tokens_text(&value)
            ),
        );
        return Ok(None);
    }
    let content;
    let brackets = syn::bracketed!(content in input);
    let parts = Punctuated::<syn::Expr, Token![,]>::parse_terminated(&content)?;
    if parts.is_empty() {
        cx.syn_error(syn::Error::new(
            brackets.span.join(),
            "`scope = []` names no part: list what separates callers, as in `scope = [auth.tenant_id, auth.user_id]`, or write `scope = global` if every caller shares the keys",
        ));
        return Ok(None);
    }
    let sources: Option<Vec<Source>> = parts.into_iter().map(|e| source(cx, e)).collect();
    Ok(sources.map(Scope::Parts))
}

/// `(arg = name, fields = [a, b])`.
fn parse_fingerprint(
    cx: &Ctxt,
    key: &Ident,
    input: ParseStream<'_>,
) -> syn::Result<Option<FingerprintArg>> {
    if !input.peek(syn::token::Paren) {
        return Err(syn::Error::new(
            key.span(),
            "write `fingerprint(fields = [amount, currency])` to hash some fields of the request, or `fingerprint(arg = name)` to choose the argument hashed",
        ));
    }
    let content;
    syn::parenthesized!(content in input);
    let mut arg: Attr<Option<Ident>> = Attr::none("fingerprint(..)", ARG);
    let mut fields: Attr<Option<FieldList>> = Attr::none("fingerprint(..)", FIELDS);
    let mut with: Attr<Option<Vec<Ident>>> = Attr::none("fingerprint(..)", WITH);
    let mut skip: Attr<Option<Vec<Ident>>> = Attr::none("fingerprint(..)", SKIP);
    while !content.is_empty() {
        let option = content.call(Ident::parse_any)?;
        if option == ARG || option == FIELDS || option == WITH || option == SKIP {
            if !content.peek(Token![=]) {
                let example = if option == ARG {
                    "fingerprint(arg = req)"
                } else if option == WITH {
                    "fingerprint(with = [region])"
                } else if option == SKIP {
                    "fingerprint(skip = [trace])"
                } else {
                    "fingerprint(fields = [amount, currency])"
                };
                return Err(syn::Error::new(
                    option.span(),
                    format!("`{option}` needs a value: write `{example}`"),
                ));
            }
            content.parse::<Token![=]>()?;
        }
        if option == ARG {
            let name: Ident = content.parse().map_err(|err| {
                syn::Error::new(
                    err.span(),
                    "`arg` names an argument of the function: write `fingerprint(arg = req)`",
                )
            })?;
            arg.set(cx, &option, Some(name));
        } else if option == FIELDS {
            let value = parse_fields(cx, &content)?;
            fields.set(cx, &option, value);
        } else if option == WITH || option == SKIP {
            let value = parse_args(cx, &option, &content)?;
            if option == WITH {
                with.set(cx, &option, Some(value));
            } else {
                skip.set(cx, &option, Some(value));
            }
        } else {
            cx.error_spanned_by(
                &option,
                format!(
                    "unknown fingerprint option `{}`: expected `fields`, `arg`, `with` or `skip`, as in `fingerprint(arg = req, fields = [amount, currency], skip = [trace])`",
                    option.unraw()
                ),
            );
            skip_to_comma(&content)?;
        }
        if content.is_empty() {
            break;
        }
        content.parse::<Token![,]>()?;
    }
    let arg_ok = arg.get().is_none_or(Option::is_some);
    let fields_ok = fields.get().is_none_or(Option::is_some);
    if !(arg_ok && fields_ok) {
        return Ok(None);
    }
    Ok(Some(FingerprintArg {
        arg: arg.into_value().flatten(),
        fields: fields.into_value().flatten(),
        with: with.into_value().flatten().unwrap_or_default(),
        skip: skip.into_value().flatten().unwrap_or_default(),
    }))
}

/// `[region, trace]`: argument names of `with = ..` or `skip = ..`.
fn parse_args(cx: &Ctxt, option: &Ident, input: ParseStream<'_>) -> syn::Result<Vec<Ident>> {
    let usage = format!(
        "write the arguments as a list of their names, as in `{} = [region]`",
        option.unraw()
    );
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(usage));
    }
    let content;
    let brackets = syn::bracketed!(content in input);
    let list = Punctuated::<Ident, Token![,]>::parse_terminated(&content)
        .map_err(|err| syn::Error::new(err.span(), usage))?;
    let list: Vec<Ident> = list.into_iter().collect();
    if list.is_empty() {
        cx.syn_error(syn::Error::new(
            brackets.span.join(),
            format!(
                "`{} = []` names no argument: name one, or remove `{}`",
                option.unraw(),
                option.unraw()
            ),
        ));
    }
    for (i, name) in list.iter().enumerate() {
        if list[..i].contains(name) {
            cx.error_spanned_by(
                name,
                format!("argument `{name}` is listed twice: remove the second `{name}`"),
            );
        }
    }
    Ok(list)
}

/// `[a, b]`.
fn parse_fields(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<FieldList>> {
    const USAGE: &str = "write the fields as a list of names, as in `fields = [amount, currency]`";
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(USAGE));
    }
    let content;
    let brackets = syn::bracketed!(content in input);
    let list = Punctuated::<Ident, Token![,]>::parse_terminated(&content)
        .map_err(|err| syn::Error::new(err.span(), USAGE))?;
    let list: Vec<Ident> = list.into_iter().collect();
    crate::fields::check_list(
        cx,
        brackets.span.join(),
        &list,
        "`fields = []` lists no field: name the fields that identify the operation, as in `fields = [amount, currency]`, or remove `fields` to hash the whole request",
    );
    Ok(Some(FieldList { list }))
}

/// `"7d"`.
fn parse_duration(
    cx: &Ctxt,
    key: Symbol,
    input: ParseStream<'_>,
) -> syn::Result<Option<Lit<Millis>>> {
    let Some(lit) = string_value(cx, input, &format!("`{key} = \"7d\"`"))? else {
        return Ok(None);
    };
    match duration::parse(&lit.value()) {
        Ok(value) => Ok(Some(Lit { lit, value })),
        Err(err) => {
            cx.error_spanned_by(&lit, err.message(key.0, &lit.value()));
            Ok(None)
        }
    }
}

/// `"exact_replay"`.
fn parse_contract(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<Lit<Contract>>> {
    let Some(lit) = string_value(cx, input, "`contract = \"exact_replay\"`")? else {
        return Ok(None);
    };
    match CONTRACTS.iter().find(|(name, _)| *name == lit.value()) {
        Some(&(_, value)) => Ok(Some(Lit { lit, value })),
        None => {
            cx.error_spanned_by(
                &lit,
                format!(
                    "unknown contract `{}`: expected one of `exact_replay` (a retry gets the first response again), `latest_state` (the current state, rendered by `lookup`), `suppress_only` (the duplicate is blocked; a minimal body with the business number)",
                    lit.value()
                ),
            );
            Ok(None)
        }
    }
}

/// `"payments.create"`.
fn parse_operation(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<LitStr>> {
    let Some(lit) = string_value(cx, input, "`operation = \"payments.create\"`")? else {
        return Ok(None);
    };
    if lit.value().trim().is_empty() {
        cx.error_spanned_by(
            &lit,
            "`operation` is empty: name the operation, as in `operation = \"payments.create\"`, or remove the key to use the function's path",
        );
        return Ok(None);
    }
    Ok(Some(lit))
}

/// `["x-request-cost", "ETag"]`, lowercased.
fn parse_headers(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<Vec<String>>> {
    const USAGE: &str =
        "write the header names as a list of strings, as in `headers = [\"x-request-cost\"]`";
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(USAGE));
    }
    let content;
    let brackets = syn::bracketed!(content in input);
    let list = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)
        .map_err(|err| syn::Error::new(err.span(), USAGE))?;
    if list.is_empty() {
        cx.syn_error(syn::Error::new(
            brackets.span.join(),
            "`headers = []` adds no header: list the response headers to replay besides `content-type` and `location`, or remove `headers`",
        ));
        return Ok(None);
    }
    let mut names: Vec<String> = Vec::new();
    let mut ok = true;
    for lit in &list {
        let name = lit.value().to_ascii_lowercase();
        if !is_header_name(&name) {
            cx.error_spanned_by(lit, invalid_header_name(&lit.value()));
            ok = false;
        } else if names.contains(&name) {
            cx.error_spanned_by(
                lit,
                format!("header `{name}` is listed twice (names ignore case): remove one"),
            );
            ok = false;
        } else {
            names.push(name);
        }
    }
    Ok(ok.then_some(names))
}

/// A positive number of bytes.
fn parse_max_bytes(cx: &Ctxt, input: ParseStream<'_>) -> syn::Result<Option<syn::Expr>> {
    let expr: syn::Expr = input.parse()?;
    if let syn::Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(int),
        ..
    }) = &expr
        && int.base10_parse::<usize>().is_ok_and(|n| n == 0)
    {
        cx.error_spanned_by(
            int,
            "`max_snapshot_bytes = 0` would store no response: write a size in bytes, as in `max_snapshot_bytes = 65536`, or remove the key to use the `Idem` handle's default (256 KiB)",
        );
        return Ok(None);
    }
    Ok(Some(expr))
}

/// A string literal; any other value is an error at it, saying to write `example`.
fn string_value(cx: &Ctxt, input: ParseStream<'_>, example: &str) -> syn::Result<Option<LitStr>> {
    if input.peek(LitStr) {
        return input.parse().map(Some);
    }
    let value: syn::Expr = input.parse()?;
    cx.error_spanned_by(
        &value,
        format!(
            "expected a string, found `{}`: write {example}",
            tokens_text(&value)
        ),
    );
    Ok(None)
}

impl Source {
    /// The span the generated code that reads this source is reported at.
    pub(crate) fn span(&self) -> proc_macro2::Span {
        match self {
            Source::Header { call, .. } => call.span(),
            Source::Expr(expr) => expr.span(),
        }
    }
}
