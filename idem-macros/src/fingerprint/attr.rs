//! Attributes of the input: `#[fingerprint(..)]` (ours: strict, every mistake is an error) and
//! `#[serde(..)]` (read only for what changes the serialized form; malformed serde attributes are
//! left for serde's own derive to report).

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{LitStr, Token};

use super::proto::{self, Proto};
use crate::attr::{
    for_each_meta, for_each_serde_meta, parse_crate_value, parse_rename_rules, parse_rename_sides,
    path_text, skip_value,
};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::symbol::*;

/// Field options, in the order `expected one of ..` lists them.
pub(crate) const FIELD_KEYS: &[Key] = &[
    Key::Env,
    Key::Skip,
    Key::Include,
    Key::Float,
    Key::Base64,
    Key::With,
];

/// A `#[fingerprint(..)]` option of a field.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    Env,
    Skip,
    Include,
    Float,
    Base64,
    With,
}

impl Key {
    pub(crate) fn symbol(self) -> Symbol {
        match self {
            Key::Env => ENV,
            Key::Skip => SKIP,
            Key::Include => INCLUDE,
            Key::Float => FLOAT,
            Key::Base64 => BASE64,
            Key::With => WITH,
        }
    }
}

/// `#[fingerprint(..)]` and `#[serde(..)]` on the struct or enum.
pub(crate) struct Container {
    /// `#[fingerprint(crate = "..")]`.
    pub(crate) krate: Option<syn::Path>,
    /// `#[serde(rename_all = "..")]` (serialize side).
    pub(crate) rename_all: RenameRule,
    /// `#[serde(rename_all = "..")]` (deserialize side).
    pub(crate) rename_all_de: RenameRule,
    /// `#[serde(default)]` / `#[serde(default = "path")]` on the struct.
    pub(crate) default: Option<SerdeDefault>,
    /// `#[serde(rename_all_fields = "..")]` (serialize side).
    pub(crate) rename_all_fields: RenameRule,
    /// `#[serde(rename_all_fields = "..")]` (deserialize side).
    pub(crate) rename_all_fields_de: RenameRule,
    /// The first of `#[serde(tag)]`, `#[serde(content)]`, `#[serde(untagged)]`.
    pub(crate) representation: Option<(Symbol, TokenStream)>,
    /// `#[serde(transparent)]`.
    pub(crate) transparent: Option<TokenStream>,
}

/// `#[serde(..)]` on an enum variant (`#[fingerprint]` takes no options there).
pub(crate) struct Variant {
    pub(crate) rename: Option<String>,
    pub(crate) rename_all: RenameRule,
    /// `#[serde(rename_all = "..")]` (deserialize side), for the variant's fields.
    pub(crate) rename_all_de: RenameRule,
    /// A tag the variant is read under that is not the one it is written under
    /// (`alias`, an asymmetric `rename`): not supported by the spec.
    pub(crate) other_tag: Option<TokenStream>,
    /// `#[serde(skip)]` or `#[serde(skip_serializing)]`.
    pub(crate) skip: Option<TokenStream>,
    /// `#[serde(untagged)]`.
    pub(crate) untagged: Option<TokenStream>,
    /// `#[prost(..)]`: a variant of a `prost::Oneof` enum.
    pub(crate) proto: Option<Proto>,
}

/// serde's `default`: the value a field takes when the input has no member for it.
pub(crate) enum SerdeDefault {
    /// `#[serde(default)]`: `Default::default()`.
    Trait,
    /// `#[serde(default = "path")]`.
    Path(syn::ExprPath),
}

/// `#[fingerprint(..)]` and `#[serde(..)]` on a field.
pub(crate) struct Field {
    /// The options given, in order of appearance, each at most once.
    pub(crate) keys: Vec<(Key, TokenStream)>,
    /// The path of `with = path`.
    pub(crate) with: Option<syn::ExprPath>,
    /// `#[serde(rename = "..")]` (serialize side).
    pub(crate) rename: Option<String>,
    /// `#[serde(rename = "..")]` (deserialize side).
    pub(crate) rename_de: Option<String>,
    /// `#[serde(alias = "..")]`, each.
    pub(crate) aliases: Vec<String>,
    /// `#[serde(default)]` / `#[serde(default = "path")]`.
    pub(crate) default: Option<SerdeDefault>,
    /// `#[serde(skip_deserializing)]` (or `skip`): never read from the input.
    pub(crate) skip_deserializing: bool,
    /// `#[serde(skip)]` or `#[serde(skip_serializing)]`.
    pub(crate) serde_skip: Option<TokenStream>,
    /// `#[serde(skip_serializing_if = "path")]`.
    pub(crate) skip_serializing_if: Option<syn::ExprPath>,
    /// `#[serde(flatten)]`.
    pub(crate) flatten: Option<TokenStream>,
    /// `#[serde(with = "module")]` or `#[serde(deserialize_with = "path")]`: the member is read
    /// by a function of the application's (the key's tokens), unless the function reads as the
    /// field type's spec does ([`reads_as_spec`]).
    pub(crate) read_with: Option<TokenStream>,
    /// An option was unknown or malformed (already reported): checks that depend on the
    /// options stay quiet rather than report a consequence of that mistake.
    pub(crate) malformed: bool,
    /// `#[prost(..)]`: a field of a prost message, or the field of a oneof variant.
    pub(crate) proto: Option<Proto>,
}

impl Field {
    /// The tokens of option `key`, if it was given.
    pub(crate) fn key(&self, key: Key) -> Option<&TokenStream> {
        self.keys.iter().find(|(k, _)| *k == key).map(|(_, t)| t)
    }

    pub(crate) fn has(&self, key: Key) -> bool {
        self.key(key).is_some()
    }
}

impl Container {
    pub(crate) fn from_ast(cx: &Ctxt, item: &syn::DeriveInput) -> Self {
        let mut krate: Option<(TokenStream, syn::Path)> = None;
        for_each_fingerprint_meta(cx, &item.attrs, "a struct or enum", |meta| {
            if meta.path == CRATE {
                let path =
                    parse_crate_value(cx, meta.value()?, "#[fingerprint(crate = \"::idem\")]")?;
                if krate.is_some() {
                    duplicate(cx, &meta.path, CRATE);
                } else if let Some(path) = path {
                    krate = Some((meta.path.to_token_stream(), path));
                }
                Ok(())
            } else {
                unknown_key(
                    cx,
                    meta,
                    "expected `crate`, as in `#[fingerprint(crate = \"::idem\")]`",
                );
                skip_value(meta)
            }
        });

        let mut attrs = Container {
            krate: krate.map(|(_, p)| p),
            rename_all: RenameRule::None,
            rename_all_de: RenameRule::None,
            default: None,
            rename_all_fields: RenameRule::None,
            rename_all_fields_de: RenameRule::None,
            representation: None,
            transparent: None,
        };
        for_each_serde_meta(&item.attrs, |meta| {
            if meta.path == RENAME_ALL {
                (attrs.rename_all, attrs.rename_all_de) = parse_rename_rules(meta)?;
            } else if meta.path == DEFAULT {
                attrs.default = Some(parse_default(meta)?);
            } else if meta.path == RENAME_ALL_FIELDS {
                (attrs.rename_all_fields, attrs.rename_all_fields_de) = parse_rename_rules(meta)?;
            } else if meta.path == TRANSPARENT {
                attrs.transparent = Some(meta.path.to_token_stream());
            } else {
                for key in [TAG, CONTENT, UNTAGGED] {
                    if meta.path == key && attrs.representation.is_none() {
                        attrs.representation = Some((key, meta.path.to_token_stream()));
                    }
                }
                skip_value(meta)?;
            }
            Ok(())
        });
        attrs
    }
}

impl Variant {
    pub(crate) fn from_ast(cx: &Ctxt, variant: &syn::Variant) -> Self {
        let proto = proto::from_attrs(&variant.attrs);
        // A oneof variant's options are its field's (prost-build's `field_attribute` puts them
        // on the variant): read with the field's.
        if proto.is_none() {
            for_each_fingerprint_meta(cx, &variant.attrs, "an enum variant", |meta| {
                unknown_key(
                    cx,
                    meta,
                    "a variant takes no `#[fingerprint(..)]` options; put `env`, `skip`, ... on its fields",
                );
                skip_value(meta)
            });
        }
        let mut attrs = Variant {
            rename: None,
            rename_all: RenameRule::None,
            rename_all_de: RenameRule::None,
            other_tag: None,
            skip: None,
            untagged: None,
            proto,
        };
        for_each_serde_meta(&variant.attrs, |meta| {
            if meta.path == RENAME {
                let (serialize, deserialize) = parse_rename_sides(meta)?;
                if serialize != deserialize {
                    attrs.other_tag = Some(meta.path.to_token_stream());
                }
                attrs.rename = serialize.or(attrs.rename.take());
            } else if meta.path == ALIAS {
                skip_value(meta)?;
                attrs.other_tag = Some(meta.path.to_token_stream());
            } else if meta.path == RENAME_ALL {
                (attrs.rename_all, attrs.rename_all_de) = parse_rename_rules(meta)?;
            } else if meta.path == SKIP || meta.path == SKIP_SERIALIZING {
                attrs.skip = Some(meta.path.to_token_stream());
            } else if meta.path == UNTAGGED {
                attrs.untagged = Some(meta.path.to_token_stream());
            } else {
                skip_value(meta)?;
            }
            Ok(())
        });
        attrs
    }
}

impl Field {
    pub(crate) fn from_ast(cx: &Ctxt, field: &syn::Field) -> Self {
        Self::from_attrs(cx, &field.attrs)
    }

    /// The options in `attrs` (a field's, or a oneof variant's and its field's).
    pub(crate) fn from_attrs(cx: &Ctxt, field_attrs: &[syn::Attribute]) -> Self {
        let mut attrs = Field {
            keys: Vec::new(),
            with: None,
            rename: None,
            rename_de: None,
            aliases: Vec::new(),
            default: None,
            skip_deserializing: false,
            serde_skip: None,
            skip_serializing_if: None,
            flatten: None,
            read_with: None,
            malformed: false,
            proto: proto::from_attrs(field_attrs),
        };
        let mut malformed = false;
        let well_formed = for_each_fingerprint_meta(cx, field_attrs, "a field", |meta| {
            let Some(&key) = FIELD_KEYS.iter().find(|k| meta.path == k.symbol()) else {
                malformed = true;
                unknown_key(
                    cx,
                    meta,
                    "expected one of `env`, `skip`, `include`, `float`, `base64`, `with`",
                );
                return skip_value(meta);
            };
            if key == Key::With {
                let path = parse_with_path(cx, meta)?;
                malformed |= path.is_none();
                if attrs.with.is_none() {
                    attrs.with = path;
                }
            } else if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
                malformed = true;
                cx.error_spanned_by(
                    &meta.path,
                    format!(
                        "`{key}` takes no value: write `#[fingerprint({key})]`",
                        key = key.symbol()
                    ),
                );
                skip_value(meta)?;
            }
            if attrs.has(key) {
                duplicate(cx, &meta.path, key.symbol());
            } else {
                attrs.keys.push((key, meta.path.to_token_stream()));
            }
            Ok(())
        });
        attrs.malformed = malformed || !well_formed;
        for_each_serde_meta(field_attrs, |meta| {
            if meta.path == RENAME {
                let (serialize, deserialize) = parse_rename_sides(meta)?;
                attrs.rename = serialize.or(attrs.rename.take());
                attrs.rename_de = deserialize.or(attrs.rename_de.take());
            } else if meta.path == ALIAS {
                let lit: LitStr = meta.value()?.parse()?;
                attrs.aliases.push(lit.value());
            } else if meta.path == DEFAULT {
                attrs.default = Some(parse_default(meta)?);
            } else if meta.path == SKIP_DESERIALIZING {
                attrs.skip_deserializing = true;
            } else if meta.path == SKIP || meta.path == SKIP_SERIALIZING {
                attrs.skip_deserializing |= meta.path == SKIP;
                attrs.serde_skip = Some(meta.path.to_token_stream());
            } else if meta.path == SKIP_SERIALIZING_IF {
                let lit: LitStr = meta.value()?.parse()?;
                attrs.skip_serializing_if = Some(lit.parse()?);
            } else if meta.path == FLATTEN {
                attrs.flatten = Some(meta.path.to_token_stream());
            } else if meta.path == WITH || meta.path == DESERIALIZE_WITH {
                let lit: LitStr = meta.value()?.parse()?;
                let path: syn::Path = lit.parse()?;
                if !reads_as_spec(&path) {
                    attrs.read_with = Some(meta.path.to_token_stream());
                }
            } else {
                skip_value(meta)?;
            }
            Ok(())
        });
        attrs
    }
}

/// Readers that accept exactly what the field type's spec accepts: idem's own
/// (`idem::deserialize::..`, `idem_runtime::deserialize::..`) and time's RFC 3339 module, whose
/// strings the timestamp spec reads.
fn reads_as_spec(path: &syn::Path) -> bool {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    matches!(
        segments.as_slice(),
        ["idem" | "idem_runtime", "deserialize", ..] | ["time", "serde", "rfc3339", ..]
    )
}

/// `default` or `default = "path"`.
fn parse_default(meta: &ParseNestedMeta<'_>) -> syn::Result<SerdeDefault> {
    if meta.input.peek(Token![=]) {
        let lit: LitStr = meta.value()?.parse()?;
        return Ok(SerdeDefault::Path(lit.parse()?));
    }
    Ok(SerdeDefault::Trait)
}

/// [`for_each_meta`] over the `#[fingerprint(..)]` attributes.
fn for_each_fingerprint_meta(
    cx: &Ctxt,
    attrs: &[syn::Attribute],
    on: &str,
    f: impl FnMut(&ParseNestedMeta<'_>) -> syn::Result<()>,
) -> bool {
    for_each_meta(cx, attrs, FINGERPRINT, on, "`#[fingerprint(env)]`", f)
}

fn unknown_key(cx: &Ctxt, meta: &ParseNestedMeta<'_>, expected: &str) {
    cx.error_spanned_by(
        &meta.path,
        format!(
            "unknown fingerprint attribute `{}`: {expected}",
            path_text(&meta.path)
        ),
    );
}

fn duplicate(cx: &Ctxt, path: &syn::Path, key: Symbol) {
    cx.error_spanned_by(
        path,
        format!("duplicate fingerprint attribute `{key}`: remove the second one"),
    );
}

/// `with = path` (or `with = "path"`, as serde writes it).
fn parse_with_path(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<syn::ExprPath>> {
    if !meta.input.peek(Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            "`with` needs a function: write `#[fingerprint(with = path::to::write_fn)]`",
        );
        return Ok(None);
    }
    let value = meta.value()?;
    if !value.peek(LitStr) {
        return value.parse().map(Some);
    }
    let lit: LitStr = value.parse()?;
    match lit.parse::<syn::ExprPath>() {
        Ok(path) => Ok(Some(path)),
        Err(_) => {
            cx.error_spanned_by(
                &lit,
                format!(
                    "`with` must name a function, as in `#[fingerprint(with = path::to::write_fn)]`; `{}` is not a path",
                    lit.value()
                ),
            );
            Ok(None)
        }
    }
}
