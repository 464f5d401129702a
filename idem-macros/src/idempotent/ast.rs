//! The macro's own view of the annotated function: which form it takes (axum or actix-web
//! handler, or framework-free function), which argument is fingerprinted and how to reach it, and every
//! key resolved to the value the expansion uses. Built by `check::plan`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::Ident;

use super::attr::{Contract, Lit, Scope, Source};
use super::duration::Millis;

/// How the function is called.
pub(crate) enum Form<'a> {
    /// An axum handler: `IdemContext` is added as its first argument (in a wrapper naming the
    /// handler), it returns a `Response`.
    Axum,
    /// An actix-web handler (`idem::actix::idempotent`): `IdemContext` is added as its first
    /// argument, it returns an `HttpResponse`.
    Actix,
    /// `store = expr`: any `async fn .. -> Result<T, E>`; a replay returns the stored `Result`.
    Consumer { store: &'a syn::Expr },
    /// A unary method of a tonic service (`&self`, `tonic::Request<T>`, `Result<Response<M>,
    /// Status>`), as written or as `#[tonic::async_trait]` expanded it.
    Tonic(Tonic<'a>),
}

/// A tonic method's parts.
pub(crate) struct Tonic<'a> {
    /// The name of its `request: Request<T>` parameter.
    pub(crate) name: &'a Ident,
    /// `T`.
    pub(crate) message: &'a syn::Type,
    /// `M` of the output.
    pub(crate) response: &'a syn::Type,
    /// What the method yields, `Result<Response<M>, Status>`.
    pub(crate) output: &'a syn::Type,
    /// `#[tonic::async_trait]` turned the `async fn` into a `fn` returning
    /// `Pin<Box<dyn Future<Output = ..> + Send + 'async_trait>>`, its body into `Box::pin(async
    /// move { .. })`: the body is that future, the generated code boxes its own.
    pub(crate) boxed: bool,
    /// `store = expr` (default `self`, through `AsIdem`).
    pub(crate) store: Option<&'a syn::Expr>,
}

/// The value that is fingerprinted.
pub(crate) struct Target {
    /// Its type (`CreatePayment` of `Json(req): Json<CreatePayment>`), with the user's spans.
    pub(crate) ty: syn::Type,
    /// An expression of type `&ty` (`&req`, `&body.0`, `&*msg`).
    pub(crate) access: TokenStream,
    /// The argument's name (`req`), if it is one of the function's arguments.
    pub(crate) name: Option<Ident>,
}

/// An argument hashed beside the target: a path parameter, a query, a URI, or one named by
/// `fingerprint(with = [..])`.
pub(crate) struct Input {
    /// Its name, the member of the hashed object.
    pub(crate) name: Ident,
    /// An expression of type `&T` where `T: Canonical`.
    pub(crate) access: TokenStream,
    /// `T` as the user wrote it, where it can be read from the argument's type: a missing
    /// `Canonical` impl is reported on it.
    pub(crate) ty: Option<syn::Type>,
}

/// What an argument of a handler is to the fingerprint, by its type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ArgKind {
    /// Part of the request a retry sends again unchanged, which selects what the handler
    /// does: path parameters, the query, the URI, a form body. Hashed unless in the scope or
    /// `fingerprint(skip = [..])`.
    Request,
    /// Headers, or the whole request: they carry what changes between retries (dates,
    /// signatures, trace ids) beside what may change the effect, and the macro cannot tell
    /// which the handler reads. The attribute must say: scope, `with` or `skip`.
    Headers,
    /// A request extractor or headers inside another type (`Option<Query<T>>`): not hashed as
    /// it is; decided like [`ArgKind::Headers`].
    Wrapped,
    /// Anything else: state, extensions, the caller's own extractors.
    Other,
}

/// The kind of an argument of type `ty` (of an actix-web handler with `actix`), by the last
/// segment of its path. A request extractor inside another type (`Option<Query<T>>`,
/// `Result<Path<T>, E>`, `WithRejection<Query<T>, E>`) is not hashed as it is: it must be
/// decided ([`ArgKind::Headers`]'s rule), never silently left out.
pub(crate) fn arg_kind(ty: &syn::Type, actix: bool) -> ArgKind {
    let Some(last) = last_segment(ty) else {
        return ArgKind::Other;
    };
    match last.ident.to_string().as_str() {
        "Path" | "Query" | "Form" => ArgKind::Request,
        // axum's; actix-web's `Uri` is of another `http` version, decided like headers.
        "RawQuery" | "Uri" | "OriginalUri" if !actix => ArgKind::Request,
        "RawQuery" | "Uri" | "OriginalUri" => ArgKind::Headers,
        "TypedHeader" | "HeaderMap" | "Header" | "Request" | "HttpRequest" | "Parts" => {
            ArgKind::Headers
        }
        _ if wraps_request(&last.arguments, actix) => ArgKind::Wrapped,
        _ => ArgKind::Other,
    }
}

/// Whether a type argument in `args` is (or wraps) a request extractor or headers.
fn wraps_request(args: &syn::PathArguments, actix: bool) -> bool {
    let syn::PathArguments::AngleBracketed(args) = args else {
        return false;
    };
    args.args.iter().any(|arg| match arg {
        syn::GenericArgument::Type(ty) => arg_kind(ty, actix) != ArgKind::Other,
        _ => false,
    })
}

/// The value an argument `pat: ty` of kind [`ArgKind::Request`] (or named by `with`) is
/// hashed by: the inner value of `Path(id): Path<T>` or `q: Query<T>` (`T`), the `Uri` of
/// `OriginalUri(uri)` or `uri: OriginalUri`, the argument itself otherwise.
pub(crate) fn input_of(pat: &syn::Pat, ty: &syn::Type) -> Option<Input> {
    let name = bound_name(pat)?.clone();
    let segment = last_segment(ty);
    let wrapper = segment.map(|s| s.ident.to_string());
    let inner = segment.and_then(|s| single_type_argument(&s.arguments));
    let wrapped = matches!(wrapper.as_deref(), Some("Path" | "Query" | "Form")) && inner.is_some();
    let opaque = matches!(wrapper.as_deref(), Some("RawQuery" | "OriginalUri"));
    let (access, ty) = match pat {
        syn::Pat::Ident(_) if wrapped => (quote!(&*#name), inner.cloned()),
        syn::Pat::Ident(_) if opaque => (quote!(&#name.0), None),
        syn::Pat::Ident(_) => match ty {
            syn::Type::Reference(r) => (quote!(#name), Some((*r.elem).clone())),
            _ => (quote!(&#name), Some(ty.clone())),
        },
        _ if opaque => (quote!(&#name), None),
        _ => (quote!(&#name), inner.cloned()),
    };
    Some(Input { name, access, ty })
}

/// Where the client key comes from.
pub(crate) enum Key<'a> {
    /// The default, `header("Idempotency-Key")`.
    DefaultHeader,
    Source(&'a Source),
}

/// Everything the expansion needs, checked.
pub(crate) struct Plan<'a> {
    pub(crate) item: &'a syn::ItemFn,
    pub(crate) form: Form<'a>,
    pub(crate) contract: Contract,
    pub(crate) target: Target,
    /// The arguments hashed beside the target, sorted by name; none for the target alone.
    pub(crate) inputs: Vec<Input>,
    /// `fingerprint(fields = [..])`; `None` hashes the whole target.
    pub(crate) fields: Option<&'a [Ident]>,
    pub(crate) key: Key<'a>,
    pub(crate) scope: &'a Scope,
    /// `ttl = ".."`; `None` takes the runtime's default.
    pub(crate) ttl: Option<&'a Lit<Millis>>,
    /// `lease = ".."`; `None` takes the runtime's default.
    pub(crate) lease: Option<&'a Lit<Millis>>,
    /// `timeout = ".."`; `None` takes the runtime's default (derived from the lease).
    pub(crate) timeout: Option<&'a Lit<Millis>>,
    /// `wait = ".."`: how long a duplicate waits for the attempt in flight; `None`: not at all.
    pub(crate) wait: Option<&'a Lit<Millis>>,
    /// `remember = ".."`: how long the key is remembered past its ttl; `None`: not at all.
    pub(crate) remember: Option<&'a Lit<Millis>>,
    pub(crate) operation: Option<&'a syn::LitStr>,
    pub(crate) headers: &'a [String],
    pub(crate) fail_open: bool,
    pub(crate) max_snapshot_bytes: Option<&'a syn::Expr>,
    pub(crate) lookup: Option<&'a syn::Expr>,
    /// `transaction = tx`: the handler's `Tx` parameter (removed from the signature, bound in
    /// the body to the transaction the runtime begins).
    pub(crate) transaction: Option<&'a syn::PatType>,
    /// `transaction = tx` on a tonic method: the name the body's transaction (an
    /// `idem::Tx<idem::AnySql>`) is bound to.
    pub(crate) tonic_transaction: Option<&'a Ident>,
    pub(crate) krate: syn::Path,
}

/// Why no target could be resolved from an argument.
pub(crate) enum NotBound {
    /// The pattern binds no single name (`Json(CreatePayment { amount, .. })`, `Json(_)`).
    Pattern,
    /// `Wrapper(name): Wrapper` without one type argument to read the type from.
    Type,
}

/// `T` of `Json<T>` (also `axum::Json<T>`, `idem::axum::Json<T>`): the type of a JSON body.
pub(crate) fn json_inner(ty: &syn::Type) -> Option<&syn::Type> {
    let syn::Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "Json" {
        return None;
    }
    single_type_argument(&last.arguments)
}

fn single_type_argument(args: &syn::PathArguments) -> Option<&syn::Type> {
    let syn::PathArguments::AngleBracketed(args) = args else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|arg| match arg {
        syn::GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    match (types.next(), types.next()) {
        (Some(ty), None) => Some(ty),
        _ => None,
    }
}

/// The name `pat` binds, for a pattern that binds exactly one: `name`, `mut name`,
/// `Wrapper(name)`, `Wrapper(mut name)`.
pub(crate) fn bound_name(pat: &syn::Pat) -> Option<&Ident> {
    match pat {
        syn::Pat::Ident(p) if p.subpat.is_none() => Some(&p.ident),
        syn::Pat::TupleStruct(p) if p.elems.len() == 1 => match &p.elems[0] {
            syn::Pat::Ident(inner) if inner.subpat.is_none() => Some(&inner.ident),
            _ => None,
        },
        _ => None,
    }
}

/// The target of argument `pat: ty`.
pub(crate) fn target_of(pat: &syn::Pat, ty: &syn::Type) -> Result<Target, NotBound> {
    match pat {
        syn::Pat::Ident(p) if p.subpat.is_none() => {
            let name = &p.ident;
            Ok(if let Some(inner) = json_inner(ty) {
                Target {
                    ty: inner.clone(),
                    access: quote!(&#name.0),
                    name: Some(name.clone()),
                }
            } else if let syn::Type::Reference(r) = ty {
                Target {
                    ty: (*r.elem).clone(),
                    access: quote!(&*#name),
                    name: Some(name.clone()),
                }
            } else {
                Target {
                    ty: ty.clone(),
                    access: quote!(&#name),
                    name: Some(name.clone()),
                }
            })
        }
        syn::Pat::TupleStruct(_) => {
            let name = bound_name(pat).ok_or(NotBound::Pattern)?;
            let syn::Type::Path(path) = ty else {
                return Err(NotBound::Type);
            };
            let inner = path
                .path
                .segments
                .last()
                .and_then(|last| single_type_argument(&last.arguments))
                .ok_or(NotBound::Type)?;
            Ok(Target {
                ty: inner.clone(),
                access: quote!(&#name),
                name: Some(name.clone()),
            })
        }
        _ => Err(NotBound::Pattern),
    }
}

/// The last path segment of `ty`, through parentheses and groups.
fn last_segment(ty: &syn::Type) -> Option<&syn::PathSegment> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        syn::Type::Paren(p) => last_segment(&p.elem),
        syn::Type::Group(g) => last_segment(&g.elem),
        _ => None,
    }
}

/// `T` of `Request<T>` (`tonic::Request<T>`).
pub(crate) fn tonic_request(ty: &syn::Type) -> Option<&syn::Type> {
    let last = last_segment(ty)?;
    (last.ident == "Request").then(|| single_type_argument(&last.arguments))?
}

/// `M` of `Result<Response<M>, Status>` (any paths): the output of a unary or server-streaming
/// tonic method.
pub(crate) fn tonic_response(ty: &syn::Type) -> Option<&syn::Type> {
    let last = last_segment(ty)?;
    if last.ident != "Result" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|arg| match arg {
        syn::GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    let (ok, err) = (types.next()?, types.next()?);
    if last_segment(err)?.ident != "Status" {
        return None;
    }
    let ok = last_segment(ok)?;
    (ok.ident == "Response").then(|| single_type_argument(&ok.arguments))?
}

/// `T` of `Pin<Box<dyn Future<Output = T> + ..>>`, the return type `#[async_trait]` gives a
/// method.
pub(crate) fn boxed_future_output(ty: &syn::Type) -> Option<&syn::Type> {
    let pin = last_segment(ty)?;
    if pin.ident != "Pin" {
        return None;
    }
    let boxed = last_segment(single_type_argument(&pin.arguments)?)?;
    if boxed.ident != "Box" {
        return None;
    }
    let syn::Type::TraitObject(dyn_) = single_type_argument(&boxed.arguments)? else {
        return None;
    };
    dyn_.bounds.iter().find_map(|bound| {
        let syn::TypeParamBound::Trait(t) = bound else {
            return None;
        };
        let future = t.path.segments.last()?;
        if future.ident != "Future" {
            return None;
        }
        let syn::PathArguments::AngleBracketed(args) = &future.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            syn::GenericArgument::AssocType(a) if a.ident == "Output" => Some(&a.ty),
            _ => None,
        })
    })
}

/// Whether a tonic message type is a stream: `Streaming<T>` (client streaming) or an associated
/// type of the service (`Self::ListStream`, server streaming).
pub(crate) fn is_stream(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Path(p) => {
            p.qself.is_some()
                || p.path.segments.first().is_some_and(|s| s.ident == "Self")
                || p.path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Streaming")
        }
        syn::Type::Paren(p) => is_stream(&p.elem),
        syn::Type::Group(g) => is_stream(&g.elem),
        syn::Type::TraitObject(_) | syn::Type::ImplTrait(_) => true,
        _ => false,
    }
}

/// The first `impl Trait` in `ty`.
pub(crate) fn find_impl_trait(ty: &syn::Type) -> Option<&syn::TypeImplTrait> {
    match ty {
        syn::Type::ImplTrait(t) => Some(t),
        syn::Type::Path(p) => p.path.segments.iter().find_map(|seg| match &seg.arguments {
            syn::PathArguments::AngleBracketed(args) => args.args.iter().find_map(|a| match a {
                syn::GenericArgument::Type(t) => find_impl_trait(t),
                _ => None,
            }),
            _ => None,
        }),
        syn::Type::Tuple(t) => t.elems.iter().find_map(find_impl_trait),
        syn::Type::Reference(r) => find_impl_trait(&r.elem),
        syn::Type::Paren(p) => find_impl_trait(&p.elem),
        syn::Type::Group(g) => find_impl_trait(&g.elem),
        syn::Type::Array(a) => find_impl_trait(&a.elem),
        syn::Type::Slice(s) => find_impl_trait(&s.elem),
        _ => None,
    }
}

/// Whether `ty` is written like idem's transaction, `Tx<S>` (also `idem::Tx<S>`): a path whose
/// last segment is `Tx` with one type argument.
pub(crate) fn looks_like_tx(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => p.path.segments.last().is_some_and(|last| {
            last.ident == "Tx" && single_type_argument(&last.arguments).is_some()
        }),
        syn::Type::Paren(p) => looks_like_tx(&p.elem),
        syn::Type::Group(g) => looks_like_tx(&g.elem),
        _ => false,
    }
}

/// Whether `ty` is written `Result<..>` (also `std::result::Result<..>`, `io::Result<T>`).
pub(crate) fn is_result(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .is_some_and(|last| last.ident == "Result"),
        syn::Type::Paren(p) => is_result(&p.elem),
        syn::Type::Group(g) => is_result(&g.elem),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(arg: &str) -> Result<(String, String), ()> {
        let arg: syn::PatType = syn::parse_str::<syn::FnArg>(arg)
            .map(|a| match a {
                syn::FnArg::Typed(t) => t,
                syn::FnArg::Receiver(_) => panic!("receiver"),
            })
            .unwrap();
        target_of(&arg.pat, &arg.ty)
            .map(|t| {
                let ty = &t.ty;
                (
                    quote!(#ty).to_string().replace(' ', ""),
                    t.access.to_string().replace(' ', ""),
                )
            })
            .map_err(|_| ())
    }

    #[test]
    fn targets_of_arguments() {
        let ok = |ty: &str, access: &str| Ok((ty.to_owned(), access.to_owned()));
        assert_eq!(target("Json(req): Json<Create>"), ok("Create", "&req"));
        assert_eq!(
            target("axum::Json(mut req): axum::Json<Create>"),
            ok("Create", "&req")
        );
        assert_eq!(target("body: Json<Create>"), ok("Create", "&body.0"));
        assert_eq!(target("msg: Message"), ok("Message", "&msg"));
        assert_eq!(target("msg: &Message"), ok("Message", "&*msg"));
        assert_eq!(target("Form(f): Form<Create>"), ok("Create", "&f"));
        assert_eq!(target("Json(_): Json<Create>"), Err(()));
        assert_eq!(target("Json(Create { a, .. }): Json<Create>"), Err(()));
        assert_eq!(target("Wrapper(w): Wrapper"), Err(()));
    }

    #[test]
    fn recognizes_tonic_signatures() {
        let ty = |s: &str| syn::parse_str::<syn::Type>(s).unwrap();
        let text = |t: Option<&syn::Type>| t.map(|t| quote!(#t).to_string().replace(' ', ""));
        assert_eq!(
            text(tonic_request(&ty("tonic::Request<Pay>"))),
            Some("Pay".into())
        );
        assert_eq!(text(tonic_request(&ty("Json<Pay>"))), None);
        let out = ty("Result<tonic::Response<pb::Payment>, tonic::Status>");
        assert_eq!(text(tonic_response(&out)), Some("pb::Payment".into()));
        assert_eq!(text(tonic_response(&ty("Result<Json<P>, E>"))), None);
        let boxed = ty(
            "::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<Response<P>, Status>> + ::core::marker::Send + 'async_trait>>",
        );
        assert_eq!(
            text(boxed_future_output(&boxed)),
            Some("Result<Response<P>,Status>".into())
        );
        assert!(is_stream(&ty("Self::ListStream")));
        assert!(is_stream(&ty("tonic::Streaming<Pay>")));
        assert!(!is_stream(&ty("pb::Payment")));
    }

    #[test]
    fn recognizes_results_and_impl_trait() {
        let ty = |s: &str| syn::parse_str::<syn::Type>(s).unwrap();
        assert!(is_result(&ty("Result<u8, E>")));
        assert!(is_result(&ty("std::io::Result<u8>")));
        assert!(!is_result(&ty("(StatusCode, Json<P>)")));
        assert!(find_impl_trait(&ty("impl IntoResponse")).is_some());
        assert!(find_impl_trait(&ty("Result<impl IntoResponse, E>")).is_some());
        assert!(find_impl_trait(&ty("Result<Json<P>, E>")).is_none());
    }
}
