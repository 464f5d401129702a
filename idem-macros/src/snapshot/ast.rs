//! The derive's view of the input: the struct, its business-number field and that field's wire
//! name (serde's renaming rules applied), with every mistake reported at the user's token.

use quote::ToTokens;
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;

use crate::attr::{
    for_each_meta, for_each_serde_meta, parse_crate_value, parse_rename_rule, parse_serialize_name,
    path_text, skip_value,
};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::fingerprint::proto::{self, Label, ProtoKind};
use crate::symbol::*;

pub(crate) struct Container<'a> {
    pub(crate) ident: &'a syn::Ident,
    pub(crate) generics: &'a syn::Generics,
    pub(crate) krate: syn::Path,
    pub(crate) biz_no: BizNo<'a>,
    /// The fields marked `#[snapshot(key)]`, kept besides the business number by a snapshot over
    /// the size limit (S12).
    pub(crate) keys: Vec<BizNo<'a>>,
    /// A prost message (a field has `#[prost(..)]`): every field has a default, so the
    /// message can be built from the business number alone (`Snapshot::from_biz_no`).
    pub(crate) proto: bool,
}

/// The field marked `#[snapshot(biz_no)]`.
pub(crate) struct BizNo<'a> {
    pub(crate) field: &'a syn::Field,
    pub(crate) ident: &'a syn::Ident,
    /// The name serde serializes it under.
    pub(crate) wire: String,
}

impl<'a> Container<'a> {
    /// `None` when there is no single business-number field (an error is recorded).
    pub(crate) fn from_ast(cx: &Ctxt, input: &'a syn::DeriveInput) -> Option<Self> {
        let krate = crate_path(cx, &input.attrs);
        let mut rename_all = RenameRule::None;
        let mut transparent = None;
        for_each_serde_meta(&input.attrs, |meta| {
            if meta.path == RENAME_ALL {
                rename_all = parse_rename_rule(meta)?;
            } else if meta.path == TRANSPARENT {
                transparent = Some(meta.path.to_token_stream());
            } else {
                skip_value(meta)?;
            }
            Ok(())
        });
        let fields = match &input.data {
            syn::Data::Struct(syn::DataStruct {
                fields: syn::Fields::Named(named),
                ..
            }) => &named.named,
            _ => {
                let keyword = match &input.data {
                    syn::Data::Struct(s) => s.struct_token.to_token_stream(),
                    syn::Data::Enum(e) => e.enum_token.to_token_stream(),
                    syn::Data::Union(u) => u.union_token.to_token_stream(),
                };
                cx.error_spanned_by(
                    keyword,
                    "`#[derive(Snapshot)]` applies to a struct with named fields: the business number is one of its fields, serialized under its name",
                );
                return None;
            }
        };
        if let Some(tokens) = transparent {
            cx.error_spanned_by(
                tokens,
                "a `#[serde(transparent)]` struct serializes as its field alone, with no member name to read the business number from: derive `Snapshot` on the type it wraps",
            );
        }

        let mut marked: Vec<(&syn::Field, &syn::Ident, syn::Path)> = Vec::new();
        let mut keys = Vec::new();
        let mut malformed = false;
        for field in fields {
            let (marks, field_malformed) = field_attr(cx, field);
            malformed |= field_malformed;
            let Some(ident) = &field.ident else { continue };
            if let Some(biz_no) = marks.biz_no {
                marked.push((field, ident, biz_no));
            }
            if let Some(key) = marks.key {
                if marks_both(&marked, ident) {
                    cx.error_spanned_by(
                        key,
                        format!(
                            "`{}` is the business number, which every snapshot keeps: remove `key`",
                            ident.unraw()
                        ),
                    );
                } else {
                    let wire = wire_name(field, ident, rename_all);
                    keys.push(BizNo { field, ident, wire });
                }
            }
        }
        let Some(&(field, ident, _)) = marked.first() else {
            // A misspelled `#[snapshot(..)]` is the error to fix, not its consequence.
            if malformed {
                return None;
            }
            cx.error_spanned_by(
                &input.ident,
                format!(
                    "`{}` has no business number: mark the field that callers use to query, ship and reconcile (a payment id, an order number) with `#[snapshot(biz_no)]`; a replay without it sends callers into an \"order again\" branch (rule S11 of docs/contract.md in idem's repository)",
                    input.ident.unraw()
                ),
            );
            return None;
        };
        for (_, other, at) in &marked[1..] {
            cx.error_spanned_by(
                at,
                format!(
                    "`{}` is already the business number, and a snapshot has exactly one: remove `#[snapshot(biz_no)]` from `{}` or from `{}`",
                    ident.unraw(),
                    other.unraw(),
                    ident.unraw()
                ),
            );
        }
        let wire = biz_no_wire_name(cx, field, ident, rename_all);
        let proto = fields.iter().any(|f| proto::from_attrs(&f.attrs).is_some());
        if proto {
            check_proto_biz_no(cx, field, ident, &marked[0].2);
        }
        Some(Container {
            ident: &input.ident,
            generics: &input.generics,
            krate: krate.unwrap_or_else(crate::fields::default_crate_path),
            biz_no: BizNo { field, ident, wire },
            keys,
            proto,
        })
    }
}

/// The business number of a protobuf message is a `string` field without presence: it is what
/// a caller reads as a string, and what `from_biz_no` can set from one.
fn check_proto_biz_no(cx: &Ctxt, field: &syn::Field, ident: &syn::Ident, at: &syn::Path) {
    let what = match proto::from_attrs(&field.attrs) {
        None => "a field without `#[prost(..)]`".to_owned(),
        Some(p) => match (p.kind, p.label) {
            (ProtoKind::Scalar { string: true }, Label::Plain | Label::Required) => return,
            (ProtoKind::Scalar { string: true }, Label::Optional) => {
                "an `optional string`".to_owned()
            }
            (_, Label::Repeated) => "a `repeated` field".to_owned(),
            (ProtoKind::Map { .. }, _) => "a `map`".to_owned(),
            (ProtoKind::Oneof, _) => "a oneof".to_owned(),
            (ProtoKind::Message | ProtoKind::Group, _) => "a message".to_owned(),
            _ => format!("declared `{}`", crate::attr::tokens_text(&p.tokens)),
        },
    };
    cx.error_spanned_by(
        at,
        format!(
            "the business number of a protobuf message must be a `string` field, and `{}` is {what}: declare the id `string {}` in the .proto file (callers query and reconcile by it as text), or mark the `string` field that holds it",
            ident.unraw(),
            ident.unraw()
        ),
    );
}

/// `#[snapshot(crate = "..")]` on the container (and errors for other keys there).
pub(crate) fn crate_path(cx: &Ctxt, attrs: &[syn::Attribute]) -> Option<syn::Path> {
    let mut krate = crate::attr::Attr::none("snapshot", CRATE);
    for_each_snapshot_meta(cx, attrs, "a struct", |meta| {
        if meta.path == CRATE {
            let path = parse_crate_value(cx, meta.value()?, "#[snapshot(crate = \"::idem\")]")?;
            krate.set(cx, &meta.path, path);
        } else if meta.path == BIZ_NO {
            cx.error_spanned_by(
                &meta.path,
                "`biz_no` marks a field: put `#[snapshot(biz_no)]` on the field that holds the business number",
            );
        } else {
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "unknown snapshot attribute `{}`: expected `crate`, as in `#[snapshot(crate = \"::idem\")]`",
                    path_text(&meta.path)
                ),
            );
            skip_value(meta)?;
        }
        Ok(())
    });
    krate.into_value().flatten()
}

/// What `#[snapshot(..)]` marks a field as.
struct FieldMarks {
    /// `biz_no`, with its tokens.
    biz_no: Option<syn::Path>,
    /// `key`, with its tokens.
    key: Option<syn::Path>,
}

/// Whether the field `ident` is already the business number.
fn marks_both(marked: &[(&syn::Field, &syn::Ident, syn::Path)], ident: &syn::Ident) -> bool {
    marked.last().is_some_and(|(_, last, _)| *last == ident)
}

/// The `#[snapshot(..)]` marks of `field`, and whether one of its attributes was malformed
/// (already reported).
fn field_attr(cx: &Ctxt, field: &syn::Field) -> (FieldMarks, bool) {
    let mut biz_no = crate::attr::Attr::none("snapshot", BIZ_NO);
    let mut key = crate::attr::Attr::none("snapshot", KEY);
    let mut malformed = false;
    let well_formed = for_each_snapshot_meta(cx, &field.attrs, "a field", |meta| {
        let slot = if meta.path == BIZ_NO {
            &mut biz_no
        } else if meta.path == KEY {
            &mut key
        } else {
            malformed = true;
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "unknown snapshot attribute `{}`: expected `biz_no` or `key`, as in `#[snapshot(biz_no)]`",
                    path_text(&meta.path)
                ),
            );
            skip_value(meta)?;
            return Ok(());
        };
        if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "`{0}` takes no value: write `#[snapshot({0})]`",
                    path_text(&meta.path)
                ),
            );
            skip_value(meta)?;
        }
        slot.set(cx, &meta.path, meta.path.clone());
        Ok(())
    });
    let marks = FieldMarks {
        biz_no: biz_no.into_value(),
        key: key.into_value(),
    };
    (marks, malformed || !well_formed)
}

/// The wire name of a key field (serde's `rename` and `rename_all` applied).
fn wire_name(field: &syn::Field, ident: &syn::Ident, rule: RenameRule) -> String {
    let mut rename = None;
    for_each_serde_meta(&field.attrs, |meta| {
        if meta.path == RENAME {
            rename = parse_serialize_name(meta)?.or(rename.take());
        } else {
            skip_value(meta)?;
        }
        Ok(())
    });
    rename.unwrap_or_else(|| rule.apply_to_field(&ident.unraw().to_string()))
}

/// The wire name of the business-number field; serde attributes that would leave it out of the
/// serialized body are errors.
fn biz_no_wire_name(cx: &Ctxt, field: &syn::Field, ident: &syn::Ident, rule: RenameRule) -> String {
    let mut rename = None;
    for_each_serde_meta(&field.attrs, |meta| {
        if meta.path == RENAME {
            rename = parse_serialize_name(meta)?.or(rename.take());
        } else if meta.path == SKIP
            || meta.path == SKIP_SERIALIZING
            || meta.path == SKIP_SERIALIZING_IF
            || meta.path == FLATTEN
        {
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "the business number must always be in the serialized body (a `suppress_only` replay and every caller read it there): remove `#[serde({})]` from `{}`",
                    path_text(&meta.path),
                    ident.unraw()
                ),
            );
            skip_value(meta)?;
        } else {
            skip_value(meta)?;
        }
        Ok(())
    });
    rename.unwrap_or_else(|| rule.apply_to_field(&ident.unraw().to_string()))
}

/// [`for_each_meta`] over the `#[snapshot(..)]` attributes.
fn for_each_snapshot_meta(
    cx: &Ctxt,
    attrs: &[syn::Attribute],
    on: &str,
    f: impl FnMut(&ParseNestedMeta<'_>) -> syn::Result<()>,
) -> bool {
    for_each_meta(cx, attrs, SNAPSHOT, on, "`#[snapshot(biz_no)]`", f)
}
