//! Procedural macros of [idem](https://docs.rs/idem). Use them through the `idem` crate, which
//! documents them with runnable examples.
//!
//! Every entry point is parse -> check -> expand; errors are collected in a `Ctxt` and
//! reported together, each spanned on the user's token.

mod attr;
mod case;
mod ctxt;
mod fields;
mod fingerprint;
mod idempotent;
mod json;
mod respan;
mod snapshot;
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
/// `skip_serializing_if` and `transparent`. The run-time spec it exports (what the tower layer
/// hashes a client's raw body by) also reads the deserialize side: `alias`, `rename(deserialize
/// = ..)` and `rename_all(deserialize = ..)` are other names of the field, `default` (on the
/// field or the struct) and `skip_deserializing` give an absent member its default, so that a
/// body hashes on both paths alike. `flatten`, and enum representations other than serde's
/// default externally tagged one (`tag`, `content`, `untagged`), are compile errors; so are
/// `Option<Option<T>>`, maps whose values are `Option`, and `skip_serializing_if` on a tuple
/// element, whose differences the canonical form would lose. A hashed field that serde reads
/// with a function of the application's (`with`, `deserialize_with`) is a compile error too: the
/// handler's value may differ from what the field type reads in the raw body (a trimming reader
/// makes `" EUR"` and `"EUR"` one request to the handler only). Write such a field with
/// `#[fingerprint(with = ..)]`, skip it, or, for a `Decimal`, read it with
/// `idem::deserialize::decimal`, which reads exactly as the spec does. Other serde attributes
/// (`serialize_with`, `into`, ...) change only what serde writes, which neither path hashes.
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

/// # Keys
///
/// Every key but `scope` is optional. Written `#[idempotent(scope = [..], ttl = "7d", ..)]`:
///
/// | key | value | default |
/// | --- | --- | --- |
/// | `key` | `header("Name")`: the client's key from that request header (in `key` and `scope`, a call of `header` always means this); or any expression of a type that is `AsRef<str>` (`msg.id`), evaluated before the body runs | `header("Idempotency-Key")` (required with `store`) |
/// | `scope` | `[expr, ..]`: what separates callers (tenant, user); each part implements `ScopePart` (`str`, `String`, integers, `Option<T>`, `Uuid`, `HeaderValue`, references); `header("X-Tenant-Id")` is that request header, absent = empty part. The parts are joined injectively into the scoped key. `default`: the scope set once on the handle (`Idem::with_default_scope`); `global`: no scope, every caller shares the key | required: a compile error without it |
/// | `fingerprint(..)` | `fields = [a, b]`: hash only these fields of the request (checked at compile time like `idem::fields!`); `arg = name`: hash this argument instead of the `Json<T>` body (a type deriving `Fingerprint`, or a whole value: string, integer, `Uuid`, `Decimal`, tuple, `Vec`, map, `serde_json::Value`, e.g. a path parameter `Path(id): Path<Uuid>`) | the whole `Json<T>` body (axum); the first argument other than the one `store` names (`store`) |
/// | `ttl` | how long a retry is recognized (contract S19/S20): `"90d"`, `"24h"`, `"1h30m"` (units `y` of 365 days, `d`, `h`, `m`, `s`, `ms`) | `"7d"` |
/// | `lease` | how long a retry waits before it may take over an attempt that stopped renewing its lease (a crashed or stalled process, S23); a running handler's lease is renewed every `lease / 2`; shorter than `ttl` | `"30s"` |
/// | `timeout` | the longest the handler may run: then it is stopped, the caller gets `503 timed-out` + `Retry-After`, and a retry continues the same operation | four leases (`"2m"` with the default lease) |
/// | `wait` | how long a duplicate that finds the first attempt of the same request in flight waits for its answer (then replayed) instead of getting `409` + `Retry-After` at once | no wait |
/// | `remember` | how long the key is remembered, from the claim, past the ttl (longer than `ttl`): a retry of the same request after the ttl is answered `410 key-expired` with the business number, and the operation does not run again | not remembered: after the ttl a retry is a new operation |
/// | `contract` | what a retry gets (S2): `"exact_replay"` (the first response again, errors included), `"latest_state"` (the current state, rendered by `lookup`), `"suppress_only"` (the duplicate is blocked; a minimal body with the business number) | `"exact_replay"` |
/// | `lookup` | with `latest_state` only: an expression of type `FnOnce(String) -> impl Future<Output = impl IntoResponse>`, called with the stored business number; evaluated before the body runs (clone what it needs: `lookup = { let db = db.clone(); move \|id\| find(db, id) }`) | - |
/// | `store` | an expression yielding the `Idem` handle (`Idem`, `&Idem`, `Arc<Idem>`): makes the function framework-free (see below) | the axum state, through `FromRef` |
/// | `operation` | the operation's name in the scoped key; treat it like a public name | axum handlers: the request's method and matched route (`POST /v1/payments`), stable when the function is renamed or moved; required with `store` |
/// | `headers` | `["x-request-cost", ..]`: response headers replayed besides `content-type` and `location` | none |
/// | `fail_open` | `fail_open` or `fail_open = true`: when the store is unavailable, run the handler without protection instead of answering `503` | fail closed |
/// | `max_snapshot_bytes` | the largest response body stored, in bytes | the `Idem` handle's (256 KiB) |
/// | `transaction` | `transaction = tx`, axum handlers only: the atomic mode. `tx` is a parameter of type `idem::Tx<S>` (`S`: `PostgresStore`, `MySqlStore`, `SqliteStore`, or `AnySql` for whichever the handle holds); idem begins it on the store's pool after the claim, the handler writes its rows in it (`&mut *tx`), and idem writes the stored result in it and commits both — or neither (`idem::store::Tx`) | two commits: the handler's own, then the result's |
/// | `crate` | `crate = "::path::to::idem"` when `idem` is renamed or re-exported | `::idem` |
///
/// # Forms
///
/// - **axum handler** (no `store`): the handler gains an `idem::axum::IdemContext` as its first
///   argument (the `Idem` handle comes from the router state, `Idem: FromRef<S>`), in a wrapper
///   that names the handler for its API description (`idem::openapi::aide`), and returns an
///   `axum::response::Response`. Its declared return type must implement
///   `idem::axum::IntoSnapshot`: the response carries the business number (S11).
/// - **framework-free** (`store = expr`): any `async fn .. -> Result<T, E>` whose `T` and `E`
///   are serde types and `E: From<IdempotencyError>`; the signature is unchanged, and a retry
///   returns the stored `Result`. A method needs `operation`.
///
/// The fingerprint, the key and the scope are computed before the body runs; the body then runs
/// at most once per key as a future whose type errors are reported at the user's code.
///
/// # Errors
///
/// At compile time, each at the offending token, saying what to write instead: an unknown or
/// repeated key; an unreadable, zero or negative `ttl`/`lease`, or a lease not shorter than the
/// ttl; an unknown contract; `latest_state` without `lookup`; a `fields` entry that is not a
/// field of the request type, an `env` or `skip` field, an empty or repeated list; a function
/// that is not `async`; a response type without a business number; no `Json<T>` argument; with
/// `store`, a return type that is not a `Result`; `transaction = tx` without a parameter `tx`,
/// with `store` or with `fail_open`, on a parameter that is not a `Tx`, or with a store that
/// cannot complete in a transaction (`Tx<MemoryStore>`); a `Tx<..>` parameter without
/// `transaction = ..`.
///
/// Set `IDEM_MACROS_DEBUG=1` while building to print the expansion.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    idempotent::expand(args.into(), item.into()).into()
}

/// `#[idempotent]` for actix-web handlers, re-exported as `idem::actix::idempotent` (write
/// `use idem::actix::idempotent;`): the same keys and checks as the axum form, documented there.
/// The handler gains an `idem::actix::IdemContext` as its first argument (the `Idem` handle
/// comes from the `web::Data<Idem>` app data) and returns an `actix_web::HttpResponse`; its
/// declared return type implements `idem::actix::IntoSnapshot`.
#[proc_macro_attribute]
pub fn idempotent_actix(args: TokenStream, item: TokenStream) -> TokenStream {
    idempotent::expand_actix(args.into(), item.into()).into()
}

/// # Attributes
///
/// - `#[snapshot(biz_no)]` on exactly one named field: the business number (payment id, order
///   number) that callers use to query, ship and reconcile (contract S11). Its type implements
///   `Display`; it is serialized under its serde name (`rename`, `rename_all` honoured), which
///   becomes `Snapshot::BIZ_NO_FIELD`. `#[serde(skip)]`, `skip_serializing(_if)` and `flatten`
///   are errors on it: the business number is always in the body.
/// - `#[snapshot(key)]` on any other fields (types implementing `Serialize`): the key fields a
///   snapshot over the size limit keeps besides the business number, under their serde names, so
///   that a replay rebuilds `{"<key>": .., "<biz_no>": ..}` rather than a bare "ok" (contract
///   S12); they become `Snapshot::key_fields`.
/// - `#[snapshot(crate = "path")]` on the struct: the path of the `idem` crate.
///
/// Set `IDEM_MACROS_DEBUG=1` while building to print the expansion.
#[proc_macro_derive(Snapshot, attributes(snapshot, serde))]
pub fn derive_snapshot(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    snapshot::derive(&input)
        .unwrap_or_else(|errors| snapshot::fallback(&input, errors))
        .into()
}
