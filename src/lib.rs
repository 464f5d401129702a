//! # idem
//!
//! Idempotent API write endpoints for Rust, the way payment companies build them.
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idem_runtime::{
    Canonical, CanonicalError, CanonicalWriter, RequestHash, Spec, ValueSpec, canonical,
    fingerprint,
};

/// A request type whose identity is a whitelist of its fields (contract S3).
///
/// Derive it with [`#[derive(Fingerprint)]`](derive@Fingerprint). [`fingerprint`] hashes every
/// field except the environment (`env`) and `skip` ones; [`fingerprint_fields`] hashes a subset
/// named with [`fields!`]:
///
/// ```
/// use idem::Fingerprint;
/// use rust_decimal::dec;
///
/// #[derive(Fingerprint)]
/// struct CreatePayment {
///     amount: rust_decimal::Decimal,
///     currency: String,
///     description: Option<String>,
///     #[fingerprint(env)]
///     client_ip: String,
/// }
///
/// let req = CreatePayment {
///     amount: dec!(100.00),
///     currency: "EUR".into(),
///     description: None,
///     client_ip: "203.0.113.7".into(),
/// };
/// assert_eq!(req.canonical_json(), r#"{"amount":100,"currency":"EUR"}"#);
/// assert_eq!(
///     req.fingerprint(),
///     idem::RequestHash::of_bytes(br#"{"amount":100,"currency":"EUR"}"#),
/// );
/// assert_eq!(
///     req.fingerprint_fields(idem::fields!(CreatePayment: amount)),
///     idem::RequestHash::of_bytes(br#"{"amount":100}"#),
/// );
/// ```
///
/// [`fingerprint`]: Fingerprint::fingerprint
/// [`fingerprint_fields`]: Fingerprint::fingerprint_fields
pub use idem_runtime::Fingerprint;

/// Derives [`Canonical`] and [`Fingerprint`](trait@Fingerprint): the fingerprint is the SHA-256
/// of the canonical JSON text of the whitelisted fields.
///
/// The canonical text is what `serde_json` would serialize, normalized: object members sorted
/// by the UTF-8 bytes of their wire names, no whitespace, `null`/`None` members omitted, numbers
/// as exact decimals (`100.00` == `100`), `env` and `skip` fields left out. It is written
/// straight into the hash's buffer: no `serde_json::Value`, no allocation per field.
///
/// ```
/// use idem::Fingerprint;
/// use rust_decimal::Decimal;
///
/// #[derive(Fingerprint, serde::Serialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Refund {
///     payment_id: String,
///     amount: Decimal,
///     #[serde(rename = "why")]
///     reason: Option<String>,
///     #[fingerprint(env)]
///     sent_at: u64,
///     #[fingerprint(skip)]
///     debug_note: String,
/// }
///
/// let refund = Refund {
///     payment_id: "pay_1".into(),
///     amount: Decimal::new(2500, 2),
///     reason: Some("duplicate".into()),
///     sent_at: 1_764_000_000,
///     debug_note: "from the retry queue".into(),
/// };
/// assert_eq!(
///     refund.canonical_json(),
///     r#"{"amount":25,"paymentId":"pay_1","why":"duplicate"}"#,
/// );
/// ```
///
/// The attributes and shapes it supports:
pub use idem_macros::Fingerprint;

/// The [`FieldMask`](fingerprint::FieldMask) of some fields of a [`Fingerprint`](trait@Fingerprint)
/// type, checked at compile time: `idem::fields!(Type: a, b, ..)`.
///
/// Pass it to [`Fingerprint::fingerprint_fields`] when an endpoint's identity is a subset of its
/// request's fields. A name that is not a field of `Type`, or a field declared `env` or `skip`,
/// is a compile error at that name; so are an empty list and a repeated field.
///
/// ```
/// use idem::Fingerprint;
///
/// #[derive(Fingerprint)]
/// struct CreatePayment {
///     amount: u64,
///     currency: String,
///     description: String,
///     #[fingerprint(env)]
///     client_ip: String,
/// }
///
/// const IDENTITY: idem::fingerprint::FieldMask = idem::fields!(CreatePayment: amount, currency);
///
/// let a = CreatePayment {
///     amount: 100,
///     currency: "EUR".into(),
///     description: "first try".into(),
///     client_ip: "203.0.113.7".into(),
/// };
/// let b = CreatePayment {
///     amount: 100,
///     currency: "EUR".into(),
///     description: "edited".into(),
///     client_ip: "198.51.100.1".into(),
/// };
/// assert_ne!(a.fingerprint(), b.fingerprint());
/// assert_eq!(a.fingerprint_fields(IDENTITY), b.fingerprint_fields(IDENTITY));
/// ```
///
/// Environment fields cannot be listed:
///
/// ```compile_fail
/// # use idem::Fingerprint;
/// #[derive(Fingerprint)]
/// struct CreatePayment {
///     amount: u64,
///     #[fingerprint(env)]
///     client_ip: String,
/// }
/// let mask = idem::fields!(CreatePayment: amount, client_ip);
/// ```
pub use idem_macros::fields;

pub use idem_runtime::store;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use idem_runtime::store::MySqlStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use idem_runtime::store::PostgresStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use idem_runtime::store::SqliteStore;
pub use idem_runtime::store::{
    Claim, ClaimRequest, Clock, Completion, KeyError, Lease, ManualClock, MemoryStore, Outcome,
    Record, RecordState, ScopedKey, Store, StoreError, Sweeper, SystemClock, Timestamp,
};

#[doc(hidden)]
pub use idem_runtime::__private;
