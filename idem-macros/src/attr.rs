//! Attribute helpers shared by every macro: reading the serde attributes that change the
//! serialized form, `crate = ".."`, and [`Attr`], a key that may be given once.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::parse::ParseStream;
use syn::{LitStr, Token};

use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::symbol::*;

/// One attribute key of a macro, given at most once: a second occurrence is reported as
/// "duplicate `what` attribute `name`" at that occurrence, like serde's `Attr::set`.
pub(crate) struct Attr<T> {
    /// `idempotent`, `snapshot`: the attribute the key belongs to, for messages.
    what: &'static str,
    name: Symbol,
    /// The key's tokens (for errors that concern the key) and its value.
    value: Option<(TokenStream, T)>,
}

impl<T> Attr<T> {
    pub(crate) fn none(what: &'static str, name: Symbol) -> Self {
        Attr {
            what,
            name,
            value: None,
        }
    }

    /// Records `value`, or reports a duplicate at `key` (the first value stays).
    pub(crate) fn set<A: ToTokens>(&mut self, cx: &Ctxt, key: A, value: T) {
        let tokens = key.into_token_stream();
        if self.value.is_some() {
            cx.error_spanned_by(
                tokens,
                format!(
                    "duplicate {} attribute `{}`: remove the second one",
                    self.what, self.name
                ),
            );
        } else {
            self.value = Some((tokens, value));
        }
    }

    /// Whether the key was given (even with a value that turned out invalid: `Some(None)`).
    pub(crate) fn is_given(&self) -> bool {
        self.value.is_some()
    }

    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref().map(|(_, v)| v)
    }

    pub(crate) fn into_value(self) -> Option<T> {
        self.value.map(|(_, v)| v)
    }

    /// The tokens of the key as written (`ttl` of `ttl = "7d"`).
    pub(crate) fn key_tokens(&self) -> Option<&TokenStream> {
        self.value.as_ref().map(|(k, _)| k)
    }
}

impl<T> Attr<Option<T>> {
    /// The valid value, if the key was given with one.
    pub(crate) fn valid(&self) -> Option<&T> {
        self.get().and_then(Option::as_ref)
    }
}

/// Runs `f` on every key of every `#[serde(..)]` in `attrs`. Parse errors are ignored: they are
/// serde's to report, and the derives only read what they understand.
pub(crate) fn for_each_serde_meta(
    attrs: &[syn::Attribute],
    mut f: impl FnMut(&ParseNestedMeta<'_>) -> syn::Result<()>,
) {
    for attr in attrs.iter().filter(|a| a.path() == SERDE) {
        let _ = attr.parse_nested_meta(|meta| f(&meta));
    }
}

/// Consumes the value of a key that is not read (`= ..` or `(..)`).
pub(crate) fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    skip_to_comma(meta.input)
}

/// Consumes tokens up to the next `,` at this level (or the end).
pub(crate) fn skip_to_comma(input: ParseStream<'_>) -> syn::Result<()> {
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<TokenTree>()?;
    }
    Ok(())
}

/// `a::b` as written, without the spaces of `to_string`.
pub(crate) fn path_text(path: &syn::Path) -> String {
    tokens_text(path)
}

/// Tokens as written, without the spaces of `to_string`, for messages.
pub(crate) fn tokens_text<T: ToTokens>(tokens: T) -> String {
    tokens.to_token_stream().to_string().replace(' ', "")
}

/// The value of `crate = "path"` (or `crate = path`); `example` is the attribute as it should be
/// written, for the message of a string that is not a path.
pub(crate) fn parse_crate_value(
    cx: &Ctxt,
    value: ParseStream<'_>,
    example: &str,
) -> syn::Result<Option<syn::Path>> {
    if !value.peek(LitStr) {
        return value.parse().map(Some);
    }
    let lit: LitStr = value.parse()?;
    match lit.parse::<syn::Path>() {
        Ok(path) => Ok(Some(path)),
        Err(_) => {
            cx.error_spanned_by(
                &lit,
                format!(
                    "`crate` must name a path, as in `{example}`; `{}` is not one",
                    lit.value()
                ),
            );
            Ok(None)
        }
    }
}

/// Both sides of `rename = ".."` (the same name) / `rename(serialize = "..", deserialize =
/// "..")`: `(serialize, deserialize)`.
pub(crate) fn parse_rename_sides(
    meta: &ParseNestedMeta<'_>,
) -> syn::Result<(Option<String>, Option<String>)> {
    if meta.input.peek(Token![=]) {
        let lit: LitStr = meta.value()?.parse()?;
        return Ok((Some(lit.value()), Some(lit.value())));
    }
    let (mut serialize, mut deserialize) = (None, None);
    meta.parse_nested_meta(|inner| {
        if inner.path == SERIALIZE {
            serialize = Some(inner.value()?.parse::<LitStr>()?.value());
        } else if inner.path == DESERIALIZE {
            deserialize = Some(inner.value()?.parse::<LitStr>()?.value());
        } else {
            skip_value(&inner)?;
        }
        Ok(())
    })?;
    Ok((serialize, deserialize))
}

/// Both sides of `rename_all = ".."` / `rename_all(serialize = "..", deserialize = "..")`.
pub(crate) fn parse_rename_rules(
    meta: &ParseNestedMeta<'_>,
) -> syn::Result<(RenameRule, RenameRule)> {
    let (serialize, deserialize) = parse_rename_sides(meta)?;
    let rule = |name: Option<String>| {
        name.and_then(|n| RenameRule::from_name(&n))
            .unwrap_or(RenameRule::None)
    };
    Ok((rule(serialize), rule(deserialize)))
}

/// The serialize-side name of `rename = ".."` / `rename(serialize = "..")`.
pub(crate) fn parse_serialize_name(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<String>> {
    Ok(parse_serialize_str(meta)?.map(|lit| lit.value()))
}

/// The serialize-side rule of `rename_all = ".."` / `rename_all(serialize = "..")`. An unknown
/// rule is serde's error; here it counts as none.
pub(crate) fn parse_rename_rule(meta: &ParseNestedMeta<'_>) -> syn::Result<RenameRule> {
    Ok(parse_serialize_str(meta)?
        .and_then(|lit| RenameRule::from_name(&lit.value()))
        .unwrap_or(RenameRule::None))
}

fn parse_serialize_str(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<LitStr>> {
    if meta.input.peek(Token![=]) {
        return meta.value()?.parse().map(Some);
    }
    let mut serialize = None;
    meta.parse_nested_meta(|inner| {
        if inner.path == SERIALIZE {
            serialize = Some(inner.value()?.parse()?);
            Ok(())
        } else {
            skip_value(&inner)
        }
    })?;
    Ok(serialize)
}

/// Runs `f` on every option of every `#[name(..)]` in `attrs`, recording malformed ones; `false`
/// if one was. `on` says where the attribute stands (`"a field"`, `"a struct"`, ..), and a bare
/// `#[name]` is answered with `field_example` on a field, `#[name(crate = "::idem")]` elsewhere.
pub(crate) fn for_each_meta(
    cx: &Ctxt,
    attrs: &[syn::Attribute],
    name: Symbol,
    on: &str,
    field_example: &str,
    mut f: impl FnMut(&ParseNestedMeta<'_>) -> syn::Result<()>,
) -> bool {
    let mut ok = true;
    for attr in attrs.iter().filter(|a| a.path() == name) {
        if !matches!(attr.meta, syn::Meta::List(_)) {
            let example = if on == "a field" {
                field_example.to_owned()
            } else {
                format!("`#[{name}(crate = \"::idem\")]`")
            };
            cx.error_spanned_by(
                attr,
                format!("`#[{name}]` needs options in parentheses on {on}, e.g. {example}"),
            );
            ok = false;
            continue;
        }
        if let Err(err) = attr.parse_nested_meta(|meta| f(&meta)) {
            cx.syn_error(err);
            ok = false;
        }
    }
    ok
}
