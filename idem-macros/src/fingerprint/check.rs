//! Checks across attributes and fields, after parsing and before code generation: everything
//! that would make a fingerprint wrong (S5 of the contract) is a compile error here.

use std::collections::BTreeMap;

use quote::ToTokens;

use super::ast::{Container, Data, Field, Kind, Style, Variant, Writer};
use super::attr::Key;
use super::proto::ProtoKind;
use super::types::find_float;
use crate::ctxt::Ctxt;

/// Field names that usually hold per-attempt environment data (contract S3/S5). A hashed field
/// whose Rust or wire name matches one of them is a compile error unless it is declared `env`,
/// `skip`, or `include`d on purpose.
///
/// Names are compared after [`normalize`]: ASCII case and the separators `_` and `-` are ignored,
/// so `clientIp`, `Client-IP` and `client_ip` all match `client_ip`.
pub(crate) const ENV_LIKE_NAMES: &[&str] = &[
    "client_ip",
    "ip",
    "ip_address",
    "remote_addr",
    "remote_ip",
    "user_agent",
    "timestamp",
    "ts",
    "sent_at",
    "request_time",
    "nonce",
    "signature",
    "sig",
    "hmac",
    "request_id",
    "trace_id",
    "span_id",
    "x_forwarded_for",
    "forwarded_for",
];

/// A field mask is a `u128`.
pub(crate) const MAX_NAMED_FIELDS: usize = 128;

fn normalize(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn looks_like_env(name: &str) -> bool {
    let name = normalize(name);
    ENV_LIKE_NAMES.iter().any(|env| normalize(env) == name)
}

pub(crate) fn check(cx: &Ctxt, cont: &Container<'_>) {
    match &cont.data {
        Data::Struct(style, fields) => {
            check_fields(cx, *style, fields, Shape::Struct);
            check_transparent(cx, cont, fields);
        }
        Data::Enum(variants) => {
            check_representation(cx, cont);
            if cont.attrs.rename_all != cont.attrs.rename_all_de {
                cx.error_spanned_by(
                    cont.ident,
                    "the variants are read under other tags than they are written under (`rename_all` with another `deserialize` rule): the tower layer's spec could not tell which variant a body is; give `rename_all` one rule",
                );
            }
            for variant in variants {
                check_variant(cx, variant);
                if cont.proto {
                    check_oneof_variant(cx, variant);
                }
            }
        }
    }
    check_field_count(cx, cont);
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Shape {
    Struct,
    Variant,
}

fn check_fields(cx: &Ctxt, style: Style, fields: &[Field<'_>], shape: Shape) {
    for field in fields {
        check_flatten(cx, field);
        check_read_with(cx, field);
        check_nulls(cx, field, style);
        check_contradictions(cx, field);
        if style == Style::Struct {
            check_env_name(cx, field);
        } else {
            check_unnamed(cx, field, style, shape);
        }
        check_float(cx, field);
        check_proto(cx, field);
    }
    if style == Style::Struct {
        check_wire_names(cx, fields);
    }
}

fn check_flatten(cx: &Ctxt, field: &Field<'_>) {
    if let Some(tokens) = &field.attrs.flatten {
        cx.error_spanned_by(
            tokens,
            "`#[serde(flatten)]` is not supported by `#[derive(Fingerprint)]`: nest the struct as a field, or list its fields in this struct",
        );
    }
}

/// A member read by the application's own function (`#[serde(with)]`, `deserialize_with`): the
/// handler's value may be another than the field type's spec reads from the raw body (a
/// trimming or case-folding reader makes `" EUR"` the same request as `"EUR"` for the handler,
/// not for the tower layer), so the field says how it is written.
fn check_read_with(cx: &Ctxt, field: &Field<'_>) {
    if field.kind() != Kind::Hashed || matches!(field.writer(), Writer::With(_)) {
        return;
    }
    if let Some(tokens) = &field.attrs.read_with {
        cx.error_spanned_by(
            tokens,
            "this member is read by a function of its own, which the fingerprint cannot see: the tower layer would hash the client's member as the field's type reads it, and one request could hash two ways; write the field with `#[fingerprint(with = path)]` (the tower layer then hashes the member as sent), leave it out with `#[fingerprint(skip)]`, or read a `Decimal` with `idem::deserialize::decimal`",
        );
    }
}

/// Values the handler tells apart that the canonical form writes alike, refused rather than
/// collapsed (an absent member and `null` are one in the canonical form; an element left out of
/// an array shifts the others): a key reused with "clear" after "leave alone" would replay.
fn check_nulls(cx: &Ctxt, field: &Field<'_>, style: Style) {
    if field.kind() != Kind::Hashed || !matches!(field.writer(), Writer::Canonical) {
        return;
    }
    if let Some(inner) = generic_arg(field.ty, &["Option"], 0)
        && generic_arg(inner, &["Option"], 0).is_some()
    {
        cx.error_spanned_by(
            field.ty,
            "`Option<Option<T>>` tells an absent member (leave alone) from `null` (clear), and the fingerprint writes both alike: a key reused with one after the other would be replayed the first answer; use an enum such as `enum Patch<T> { Keep, Clear, Set(T) }` that derives `Fingerprint`, or write the field with `#[fingerprint(with = path)]`",
        );
    }
    for map in ["HashMap", "BTreeMap", "IndexMap"] {
        if let Some(value) = generic_arg(field.ty, &[map], 1)
            && generic_arg(value, &["Option"], 0).is_some()
        {
            cx.error_spanned_by(
                field.ty,
                format!(
                    "a `{map}` whose values are `Option` tells `{{\"k\": null}}` (remove k) from `{{}}`, and the fingerprint omits null members: a key reused with one after the other would be replayed the first answer; make the values an enum that derives `Fingerprint` (`Remove`, `Set(V)`), or write the field with `#[fingerprint(with = path)]`"
                ),
            );
        }
    }
    if style != Style::Struct
        && let Some(path) = &field.attrs.skip_serializing_if
    {
        cx.error_spanned_by(
            path,
            "`skip_serializing_if` on an element of a tuple shifts the elements after it: `(Some(1), None)` and `(None, Some(1))` would both be `[1]`; name the fields, or remove `skip_serializing_if`",
        );
    }
}

/// The type argument `index` of `ty` when its last segment is one of `names` (`T` of
/// `Option<T>`, `V` of `HashMap<K, V>`).
fn generic_arg<'t>(ty: &'t syn::Type, names: &[&str], index: usize) -> Option<&'t syn::Type> {
    let syn::Type::Path(p) = ty else {
        return None;
    };
    let last = p.path.segments.last()?;
    if !names.iter().any(|n| last.ident == n) {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args
        .iter()
        .filter_map(|a| match a {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .nth(index)
}

/// Pairs of options that cannot be combined, and why.
fn conflict(a: Key, b: Key) -> Option<&'static str> {
    use Key::*;
    let pair = |x, y| (a == x && b == y) || (a == y && b == x);
    if pair(Env, Include) || pair(Skip, Include) {
        Some(
            "`include` puts the field into the fingerprint, `env` and `skip` keep it out; keep the one you mean",
        )
    } else if pair(Env, Skip) {
        Some(
            "both keep the field out of the fingerprint; keep `env` for values that vary per attempt (client ip, timestamps, signatures), `skip` for anything else",
        )
    } else if [Float, Base64, With].contains(&a) && [Float, Base64, With].contains(&b) {
        Some("`float`, `base64` and `with` each choose how the field is written; keep one of them")
    } else if [Float, Base64, With].contains(&a) || [Float, Base64, With].contains(&b) {
        Some(
            "an `env` or `skip` field is never written, so the way to write it means nothing; remove one of them",
        )
    } else {
        None
    }
}

fn check_contradictions(cx: &Ctxt, field: &Field<'_>) {
    let keys = &field.attrs.keys;
    for (j, (later, tokens)) in keys.iter().enumerate() {
        if let Some((earlier, why)) = keys[..j]
            .iter()
            .find_map(|(earlier, _)| conflict(*earlier, *later).map(|why| (earlier, why)))
        {
            cx.error_spanned_by(
                tokens,
                format!(
                    "`{}` contradicts `{}` on the same field: {why}",
                    later.symbol(),
                    earlier.symbol()
                ),
            );
        }
    }
    if let (Some(include), Some(_)) = (field.attrs.key(Key::Include), &field.attrs.serde_skip) {
        cx.error_spanned_by(
            include,
            "`include` contradicts `#[serde(skip)]`: serde never serializes this field, so the run-time fingerprint could not hash it; remove one of them",
        );
    }
}

fn check_env_name(cx: &Ctxt, field: &Field<'_>) {
    if field.attrs.malformed || field.kind() != Kind::Hashed || field.attrs.has(Key::Include) {
        return;
    }
    let Some(rust) = field.rust_name() else {
        return;
    };
    let shown = if looks_like_env(&rust) {
        format!("field `{rust}`")
    } else if looks_like_env(&field.wire) {
        format!("field `{rust}` (serialized as `{}`)", field.wire)
    } else {
        return;
    };
    cx.error_spanned_by(
        &field.original.ident,
        format!(
            "{shown} looks like an environment field: it differs between retries, so hashing it turns every retry into a 422 conflict and clients retry forever; mark it `#[fingerprint(env)]` (or `#[fingerprint(skip)]`), or `#[fingerprint(include)]` if it really identifies the operation"
        ),
    );
}

fn check_unnamed(cx: &Ctxt, field: &Field<'_>, style: Style, shape: Shape) {
    let what = match (style, shape) {
        (Style::Newtype, Shape::Struct) => "the field of a newtype struct is the whole value",
        _ => "an element of a tuple cannot be left out without shifting the others",
    };
    for key in [Key::Env, Key::Skip, Key::Include] {
        if let Some(tokens) = field.attrs.key(key) {
            cx.error_spanned_by(
                tokens,
                format!(
                    "`{}` applies to named fields only: {what}; give the field a name, or use `#[serde(skip)]` to leave it out of the serialized form as well",
                    key.symbol()
                ),
            );
        }
    }
}

fn check_float(cx: &Ctxt, field: &Field<'_>) {
    if field.attrs.malformed {
        return;
    }
    let float = find_float(field.ty);
    if let Some(tokens) = field.attrs.key(Key::Float) {
        // With `base64` or `with` too, the contradiction is the error to fix.
        let contradicted = field
            .attrs
            .keys
            .iter()
            .any(|(k, _)| *k != Key::Float && conflict(Key::Float, *k).is_some());
        if float.is_none() && !contradicted {
            cx.error_spanned_by(
                tokens,
                format!(
                    "`float` applies to `f32` and `f64` fields (also inside `Option`, `Vec` and arrays), and `{}` is neither; remove `#[fingerprint(float)]`",
                    field.ty.to_token_stream().to_string().replace(' ', "")
                ),
            );
        }
        return;
    }
    let written_by_canonical = field.kind() == Kind::Hashed
        && !field.attrs.has(Key::Base64)
        && !field.attrs.has(Key::With);
    if let (true, Some(float)) = (written_by_canonical, float) {
        let which = match field.rust_name() {
            Some(name) => format!("field `{name}`"),
            None => "this field".to_owned(),
        };
        cx.error_spanned_by(
            float,
            format!(
                "{which} holds a binary float (`{float}`), which has no exact decimal form: add `#[fingerprint(float)]` to hash its shortest round-trip text, or use `rust_decimal::Decimal`"
            ),
        );
    }
}

/// Prost fields the derive cannot write, and options that mean nothing on them.
fn check_proto(cx: &Ctxt, field: &Field<'_>) {
    let Some(proto) = &field.attrs.proto else {
        return;
    };
    if field.attrs.malformed || field.kind() != Kind::Hashed {
        return;
    }
    if let Some(tokens) = field.attrs.key(Key::Base64) {
        cx.error_spanned_by(
            tokens,
            "`base64` does not apply to a field of a protobuf message: `bytes` fields are written as base64 already, and other kinds hold no bytes; remove `#[fingerprint(base64)]`",
        );
    }
    if proto.kind == ProtoKind::Group && field.attrs.with.is_none() {
        cx.error_spanned_by(
            &proto.tokens,
            "protobuf groups (`group`, deprecated since proto2) are not supported by `#[derive(Fingerprint)]`: declare the group as a nested message, write the field with `#[fingerprint(with = path)]`, or mark it `#[fingerprint(skip)]`",
        );
    }
}

/// A variant of a `prost::Oneof` enum is one field of the message: a newtype with `#[prost(..)]`.
fn check_oneof_variant(cx: &Ctxt, variant: &Variant<'_>) {
    if variant.attrs.proto.is_none() {
        cx.error_spanned_by(
            variant.ident,
            format!(
                "variant `{}` has no `#[prost(..)]` attribute, unlike the other variants: in a `prost::Oneof` enum every variant is one field of the message, e.g. `#[prost(string, tag = \"10\")] {}(String)`",
                variant.ident, variant.ident
            ),
        );
    } else if variant.style != Style::Newtype {
        cx.error_spanned_by(
            variant.ident,
            format!(
                "variant `{}` of a oneof must hold exactly one field, the value of that member of the message: write `{}(T)`",
                variant.ident, variant.ident
            ),
        );
    }
}

fn check_wire_names(cx: &Ctxt, fields: &[Field<'_>]) {
    let mut seen: BTreeMap<&str, &Field<'_>> = BTreeMap::new();
    for field in fields.iter().filter(|f| f.kind() != Kind::Skipped) {
        if let Some(first) = seen.insert(&field.wire, field) {
            cx.error_spanned_by(
                &field.original.ident,
                format!(
                    "fields `{}` and `{}` are both serialized as `{}`: rename one of them with `#[serde(rename = \"..\")]`",
                    first.rust_name().unwrap_or_default(),
                    field.rust_name().unwrap_or_default(),
                    field.wire
                ),
            );
        }
    }
}

fn check_transparent(cx: &Ctxt, cont: &Container<'_>, fields: &[Field<'_>]) {
    let Some(tokens) = &cont.attrs.transparent else {
        return;
    };
    let mut serialized = fields.iter().filter(|f| f.attrs.serde_skip.is_none());
    match (serialized.next(), serialized.next()) {
        (Some(field), None) => {
            for key in [Key::Env, Key::Skip] {
                if let Some(tokens) = field.attrs.key(key) {
                    cx.error_spanned_by(
                        tokens,
                        format!(
                            "`{}` on the only serialized field of a `#[serde(transparent)]` struct leaves nothing to fingerprint; remove it",
                            key.symbol()
                        ),
                    );
                }
            }
        }
        _ => cx.error_spanned_by(
            tokens,
            "`#[serde(transparent)]` needs exactly one field that is not `#[serde(skip)]`",
        ),
    }
}

fn check_representation(cx: &Ctxt, cont: &Container<'_>) {
    if let Some((key, tokens)) = &cont.attrs.representation {
        cx.error_spanned_by(
            tokens,
            format!(
                "`#[serde({key})]` is not supported: `#[derive(Fingerprint)]` supports only serde's default externally tagged representation (`\"Variant\"` or `{{\"Variant\":payload}}`); remove `{key}`, or implement `Canonical` by hand"
            ),
        );
    }
}

fn check_variant(cx: &Ctxt, variant: &Variant<'_>) {
    if let Some(tokens) = &variant.attrs.untagged {
        cx.error_spanned_by(
            tokens,
            "`#[serde(untagged)]` is not supported: `#[derive(Fingerprint)]` supports only serde's default externally tagged representation (`\"Variant\"` or `{\"Variant\":payload}`); remove `untagged`",
        );
    }
    if let Some(tokens) = &variant.attrs.skip {
        cx.error_spanned_by(
            tokens,
            format!(
                "variant `{}` is never serialized (`#[serde(skip)]`), so it has no fingerprint; remove the attribute, or keep this variant out of request types",
                variant.ident
            ),
        );
    }
    if let Some(tokens) = &variant.attrs.other_tag {
        cx.error_spanned_by(
            tokens,
            format!(
                "variant `{}` is read under a tag it is not written under (`alias`, or `rename` with another `deserialize` name): the tower layer's spec could not tell which variant a body is; give it one name",
                variant.ident
            ),
        );
    }
    check_fields(cx, variant.style, &variant.fields, Shape::Variant);
}

fn check_field_count(cx: &Ctxt, cont: &Container<'_>) {
    if let Some(field) = cont.named_fields().get(MAX_NAMED_FIELDS) {
        cx.error_spanned_by(
            &field.original.ident,
            format!(
                "`{}` has {} fields, but a fingerprint type can have at most {MAX_NAMED_FIELDS} (one bit each in a `FieldMask`); group some of them into a nested struct",
                cont.ident,
                cont.named_fields().len()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::looks_like_env;

    #[test]
    fn env_names_ignore_case_and_separators() {
        for name in [
            "client_ip",
            "clientIp",
            "CLIENT-IP",
            "ip",
            "userAgent",
            "X-Forwarded-For",
            "ts",
        ] {
            assert!(looks_like_env(name), "{name}");
        }
        for name in [
            "amount",
            "ip_range",
            "tip",
            "timestamps_enabled",
            "signatory",
        ] {
            assert!(!looks_like_env(name), "{name}");
        }
    }
}
