//! Procedural macros of [idem](https://docs.rs/idem). Use them through the `idem` crate, which
//! documents them with runnable examples.
//!
//! Every entry point is parse -> check -> expand; errors are collected in a `Ctxt` and
//! reported together, each spanned on the user's token.

mod case;
mod ctxt;
mod fields;
mod fingerprint;
mod json;
mod respan;
mod symbol;

use proc_macro::TokenStream;

/// # Field attributes
///
/// - `#[fingerprint(env)]`: the field varies per attempt (client ip, timestamps, signatures,
///   request ids) and is never hashed. A field whose name looks like one (`client_ip`, `ip`,
///   `user_agent`, `timestamp`, `ts`, `sent_at`, `nonce`, `signature`, `request_id`,
///   `trace_id`, ...; ASCII case, `_` and `-` ignored; Rust or wire name) must say so, or the
///   derive fails: hashing it would turn every retry into a 422 conflict (contract S5).
/// - `#[fingerprint(skip)]`: not part of the operation's identity; never hashed.
/// - `#[fingerprint(include)]`: hash a field whose name looks like an environment field,
///   because it really identifies the operation.
/// - `#[fingerprint(float)]`: `f32`/`f64` fields (also inside `Option`, `Vec`, arrays) must opt
///   in; they are hashed as the exact decimal of their shortest round-trip text (NaN and
///   infinities are `null`). Prefer `rust_decimal::Decimal` for money.
/// - `#[fingerprint(base64)]`: bytes (`Vec<u8>`, `[u8; N]`, `Box<[u8]>`, ...) as a padded
///   base64 string.
/// - `#[fingerprint(with = path)]`: written by `path(&self.field, w)`, a
///   `fn(&FieldTy, &mut CanonicalWriter<'_>)`; such a field is never `null`.
///
/// `env`, `skip` and `include` apply to named fields only; a field takes at most one of `float`,
/// `base64`, `with`, and at most one of `env`, `skip`, `include`.
///
/// # Container attribute
///
/// - `#[fingerprint(crate = "path")]`: the path of the `idem` crate, when it is renamed or
///   re-exported.
///
/// # serde attributes
///
/// The derive hashes what `serde_json` serializes, so it reads these serde attributes:
/// `rename`, `rename(serialize = ..)`, `rename_all` (every case, also `rename_all(serialize =
/// ..)`), `rename_all_fields`, `skip`/`skip_serializing` (the field is not hashed),
/// `skip_serializing_if` and `transparent`. `flatten`, and enum representations other than
/// serde's default externally tagged one (`tag`, `content`, `untagged`), are compile errors.
/// Other serde attributes are ignored; `serialize_with`/`with` and `into` change what serde
/// writes but not what the derive hashes: give such a field `#[fingerprint(with = ..)]`.
///
/// # Shapes
///
/// - struct with named fields: an object of its hashed fields, members sorted by the bytes of
///   their wire names; `null` members omitted;
/// - newtype struct `struct Amount(Decimal)`: the inner value (like serde);
/// - tuple struct: an array (serde-skipped elements left out); unit struct: `null`;
/// - enum, externally tagged like serde: `"Unit"`, `{"Newtype":value}`, `{"Tuple":[a,b]}`,
///   `{"Struct":{..}}` (field attributes apply inside struct variants).
///
/// Unions are rejected; so are more than 128 named fields (one bit each in a `FieldMask`).
/// Type parameters used by hashed fields get a `Canonical` bound; `Fields` and `FIELDS` (used
/// by `idem::fields!`) exist for structs with named fields only.
///
/// Set `IDEM_MACROS_DEBUG=1` while building to print the expansion.
#[proc_macro_derive(Fingerprint, attributes(fingerprint, serde))]
pub fn derive_fingerprint(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    fingerprint::derive(&input)
        .unwrap_or_else(|errors| fingerprint::fallback(&input, errors))
        .into()
}

/// # Errors
///
/// At compile time, each at the offending token: a name that is not a field of `Type`
/// ("no field `x` on type `__IdemFieldsOfType`"), a field declared `env` or `skip` (or
/// `#[serde(skip)]`), a repeated field, an empty list, and a `Type` that does not implement
/// `Fingerprint` or has no named fields.
#[proc_macro]
pub fn fields(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as fields::FieldsInput);
    fields::check(&input)
        .map(|()| fields::expand(&fields::default_crate_path(), &input.ty, &input.fields()))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
