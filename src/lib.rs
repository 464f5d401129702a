//! # idem
//!
//! Idempotent API write endpoints for Rust, the way payment companies build them.
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idem_runtime::fingerprint::RequestHash;
pub use idem_runtime::json;

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
/// Values that are not structs are fingerprinted whole — strings, integers, `Uuid`, `Decimal`,
/// timestamps, tuples of them, `Vec`, maps and `serde_json::Value` — so that `#[idempotent]` can
/// hash a path parameter or a JSON array body:
///
/// ```
/// use idem::Fingerprint;
/// assert_eq!(
///     ("acct_1".to_owned(), 42u64).fingerprint(),
///     idem::RequestHash::of_bytes(br#"["acct_1",42]"#),
/// );
/// ```
///
/// [`fingerprint`]: Fingerprint::fingerprint
/// [`fingerprint_fields`]: Fingerprint::fingerprint_fields
pub use idem_runtime::Fingerprint;

/// Derives [`Canonical`](fingerprint::Canonical) and [`Fingerprint`](trait@Fingerprint): the fingerprint is the SHA-256
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

pub use idem_runtime::key::ScopePart;
pub use idem_runtime::seal;
pub use idem_runtime::store::MemoryStore;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use idem_runtime::store::mysql::MySqlStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use idem_runtime::store::postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use idem_runtime::store::redis::RedisStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use idem_runtime::store::sqlite::SqliteStore;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
)]
pub use idem_runtime::store::{AnySql, SqlTx, Tx};

/// The idempotency key: what a client may send ([`parse_header_key`](key::parse_header_key),
/// [`validate_key`](key::validate_key), [`InvalidKey`](key::InvalidKey)) and the key a store
/// claims ([`ScopedKey`](key::ScopedKey): the client key scoped by its caller and operation).
///
/// [`ScopePart`], what a value must be to scope a key, is at the root.
pub mod key {
    pub use idem_runtime::key::{
        InvalidKey, MAX_CLIENT_KEY_CHARS, ScopedKey, parse_header_key, scoped_key, validate_key,
        write_scope_part,
    };
}

/// Implementing a fingerprint by hand: [`Canonical`](fingerprint::Canonical) values written by a
/// [`CanonicalWriter`](fingerprint::CanonicalWriter), and the field masks of
/// [`fields!`].
///
/// The [`Fingerprint`](trait@Fingerprint) trait and the [`RequestHash`] are at the root. The
/// canonical form is specified in `docs/fingerprint.md`.
pub mod fingerprint {
    pub use idem_runtime::fingerprint::{
        Canonical, CanonicalWriter, Env, FieldMask, FieldRef, Hashable, Hashed, NoFields,
        ParseRequestHashError, Skipped, hashable,
    };
}

/// Claim stores, for implementing or operating one: the [`Store`](store::Store) trait and its
/// types, the [`Sweeper`](store::Sweeper) that purges expired records, clocks, and each backend's
/// SQL text or scripts in its module.
///
/// The stores themselves ([`MemoryStore`] and the backends' stores) and the atomic mode's types
/// are at the root.
pub mod store {
    pub use idem_runtime::store::{
        BoxError, BoxFuture, Chain, Claim, ClaimRequest, Clock, Completion, ConnectCause,
        DEFAULT_RETRY_AFTER, Lease, MAX_DURATION, ManualClock, Outcome, Record, RecordState, Store,
        StoreError, Sweeper, SweeperHandle, SystemClock, Timestamp, Unreachable, masked_url,
    };
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
    )]
    pub use idem_runtime::store::{TxStore, begin_cancel_safe};

    /// What [`PostgresStore`](crate::PostgresStore) says about its standbys
    /// ([`Replication`](postgres::Replication)) and the SQL it runs.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub mod postgres {
        pub use idem_runtime::store::postgres::{NOW_MS_SQL, Replication, sql};
    }

    /// The SQL [`MySqlStore`](crate::MySqlStore) runs.
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub mod mysql {
        pub use idem_runtime::store::mysql::{NOW_MS_SQL, sql};
    }

    /// The SQL [`SqliteStore`](crate::SqliteStore) runs.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub mod sqlite {
        pub use idem_runtime::store::sqlite::{NOW_MS_SQL, sql};
    }

    /// [`RedisStore`](crate::RedisStore)'s connection, what it reports of replicas that fell
    /// behind, and its scripts.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub mod redis {
        pub use idem_runtime::store::redis::{RedisConnection, ReplicasBehind, scripts};
    }
}

/// Makes an axum handler (or any `async fn .. -> Result<T, E>`) idempotent: the request is
/// fingerprinted before the body runs, the key is claimed in the store, and the body runs until
/// one result is stored; retries get the stored response (`Idempotent-Replayed: true`), a key
/// reused with another request gets `422`, a concurrent duplicate `409` + `Retry-After`, an
/// unavailable store `503` + `Retry-After`. After a crash, a cancellation or a timeout the body
/// may run again, always under the same [`operation_id`]: deduplicate effects outside the store
/// on it. The HTTP behaviour is documented in `docs/http.md`.
///
/// Every handler says who may share a key: `scope = [..]` with the caller's authenticated
/// identity (below), `scope = default` for the scope set once on the handle
/// ([`Idem::with_default_scope`]), or `scope = global`. Without `operation = ".."`, an axum
/// handler's operation is its method and route (`POST /payments`), which survive renaming the
/// function.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use axum::{Router, body::Body, http::{Request, StatusCode, request::Parts}, routing::post};
/// use axum::extract::FromRequestParts;
/// use idem::{Fingerprint, Idem, Snapshot, axum::Json, idempotent};
/// use tower::ServiceExt;
///
/// /// The authenticated caller. (Here from a header, as behind a gateway that verified the token
/// /// and sets it; a service that authenticates itself reads its verified session instead.)
/// struct Caller { tenant_id: String }
///
/// impl<S: Send + Sync> FromRequestParts<S> for Caller {
///     type Rejection = StatusCode;
///     async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
///         let tenant = parts.headers.get("x-gateway-tenant").and_then(|v| v.to_str().ok());
///         let tenant_id = tenant.ok_or(StatusCode::UNAUTHORIZED)?.to_owned();
///         Ok(Caller { tenant_id })
///     }
/// }
///
/// #[derive(Fingerprint, serde::Deserialize)]
/// struct CreatePayment {
///     amount: rust_decimal::Decimal,
///     currency: String,
/// }
///
/// #[derive(Snapshot, serde::Serialize)]
/// struct Payment {
///     #[snapshot(biz_no)]
///     id: String,
///     amount: rust_decimal::Decimal,
/// }
///
/// #[idempotent(scope = [caller.tenant_id], ttl = "90d", lease = "10s")]
/// async fn create_payment(
///     caller: Caller,
///     Json(req): Json<CreatePayment>,
/// ) -> (StatusCode, Json<Payment>) {
///     let op = idem::operation_id().expect("set inside the handler");
///     let id = format!("pay_{}", &op.as_str()[..8]);
///     (StatusCode::CREATED, Json(Payment { id, amount: req.amount }))
/// }
///
/// let app = Router::new()
///     .route("/payments", post(create_payment))
///     .with_state(Idem::new(idem::MemoryStore::new()));
/// let request = |body: &'static str| Request::post("/payments")
///     .header("content-type", "application/json")
///     .header("x-gateway-tenant", "acme")
///     .header("idempotency-key", "\"3f1c9a1e-5d0b-4c63-9a55-0c1f2a7b9e10\"")
///     .body(Body::from(body))
///     .unwrap();
/// let first = app.clone().oneshot(request(r#"{"amount":"100.00","currency":"EUR"}"#)).await.unwrap();
/// assert_eq!(first.status(), StatusCode::CREATED);
/// // The same payment written differently is the same request (100 == 100.00).
/// let retry = app.clone().oneshot(request(r#"{"currency":"EUR","amount":"100"}"#)).await.unwrap();
/// assert_eq!(retry.status(), StatusCode::CREATED);
/// assert_eq!(retry.headers()["idempotent-replayed"], "true");
/// // Another amount under the same key is refused.
/// let other = app.oneshot(request(r#"{"amount":"5","currency":"EUR"}"#)).await.unwrap();
/// assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
/// # });
/// ```
///
/// Outside axum (a queue consumer, a cron job, a webhook processor), `store = ..` gives the
/// function its [`Idem`] handle and `key = ..` its key; the signature stays as written, and a
/// redelivery gets the stored `Result` back (`examples/consumer.rs` is a complete consumer):
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem::{Fingerprint, Idem, IdempotencyError, idempotent};
///
/// #[derive(Fingerprint)]
/// struct Refund {
///     #[fingerprint(skip)]
///     message_id: String,
///     payment_id: String,
///     amount: u64,
///     #[fingerprint(env)]
///     delivered_at: u64,
/// }
///
/// #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// enum RefundError {
///     TooLarge,
///     Idempotency(u16),
/// }
/// impl From<IdempotencyError> for RefundError {
///     fn from(e: IdempotencyError) -> Self {
///         RefundError::Idempotency(e.status())
///     }
/// }
///
/// #[idempotent(
///     store = idem,
///     key = msg.message_id,
///     scope = global, // message ids are unique across the queue's producers
///     operation = "refunds.issue",
///     fingerprint(arg = msg),
///     ttl = "30d",
/// )]
/// async fn refund(idem: &Idem, msg: Refund) -> Result<String, RefundError> {
///     if msg.amount > 10_000 {
///         return Err(RefundError::TooLarge);
///     }
///     Ok(format!("re_{}_{}", msg.payment_id, msg.amount))
/// }
///
/// let idem = Idem::new(idem::MemoryStore::new());
/// let msg = |amount, delivered_at| Refund {
///     message_id: "m-1".into(),
///     payment_id: "pay_1".into(),
///     amount,
///     delivered_at,
/// };
/// assert_eq!(refund(&idem, msg(500, 1)).await, Ok("re_pay_1_500".into()));
/// // Redelivered later: the stored result, not a second refund.
/// assert_eq!(refund(&idem, msg(500, 2)).await, Ok("re_pay_1_500".into()));
/// // The same message id with another amount: the key was reused (422).
/// assert_eq!(refund(&idem, msg(900, 3)).await, Err(RefundError::Idempotency(422)));
/// # });
/// ```
///
/// A fingerprint that would hash an environment field is a compile error at the field's name
/// (contract S5: every retry would be a conflict):
///
/// ```compile_fail
/// # use idem::{Fingerprint, Snapshot, axum::Json, idempotent};
/// # #[derive(Snapshot, serde::Serialize)]
/// # struct Payment { #[snapshot(biz_no)] id: String }
/// #[derive(Fingerprint, serde::Deserialize)]
/// struct CreatePayment {
///     amount: u64,
///     #[fingerprint(env)]
///     client_ip: String,
/// }
///
/// #[idempotent(fingerprint(fields = [amount, client_ip]))]
/// async fn create_payment(Json(req): Json<CreatePayment>) -> Json<Payment> {
///     Json(Payment { id: format!("pay_{}", req.amount) })
/// }
/// ```
///
/// The keys, the two forms and the compile-time checks:
pub use idem_macros::idempotent;

/// Derives [`Snapshot`](trait@Snapshot) for a response body: mark the business number field
/// `#[snapshot(biz_no)]` (S11).
///
/// ```
/// use idem::Snapshot;
///
/// #[derive(Snapshot, serde::Serialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Order {
///     #[snapshot(biz_no)]
///     order_no: String,
///     total: u64,
/// }
/// let order = Order { order_no: "o-17".into(), total: 3 };
/// assert_eq!(order.biz_no(), "o-17");
/// assert_eq!(Order::BIZ_NO_FIELD, "orderNo");
/// ```
pub use idem_macros::Snapshot;

pub use idem_runtime::engine::problem;
pub use idem_runtime::engine::{
    AsIdem, Contract, DefaultPolicy, Disposition, Expired, HandlerConfig, Idem, IdempotencyError,
    OperationId, OutcomePolicy, ReplayCache, Snapshot, operation_id, run_once,
};
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub use idem_runtime::tonic;
/// The actix-web front (feature `actix`): `use idem::actix::idempotent;` for `#[idempotent]` on
/// actix-web handlers, the [`IdemContext`](actix::IdemContext) it adds, the
/// [`Idempotency`](actix::Idempotency) middleware; see `docs/guides/actix.md`.
#[cfg(feature = "actix")]
#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
pub mod actix {
    pub use idem_macros::idempotent_actix as idempotent;
    pub use idem_runtime::actix::*;
}
/// The axum front (feature `axum`): the [`IdemContext`](axum::IdemContext) `#[idempotent]` adds
/// to a handler, the JSON extractor whose rejections are problem documents
/// ([`Json`](axum::Json)), [`IntoSnapshot`](axum::IntoSnapshot), and the tower middleware
/// ([`Idempotency`](axum::Idempotency), made by the [`IdempotencyLayer`] at the root); see
/// `docs/http.md`.
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum {
    pub use idem_runtime::axum::{
        IdemContext, Idempotency, IntoSnapshot, Json, JsonRejection, ResponseFuture, SnapshotBody,
    };
}
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use idem_runtime::axum::IdempotencyLayer;
#[cfg(any(feature = "axum", feature = "actix"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "axum", feature = "actix"))))]
pub use idem_runtime::http;
#[cfg(feature = "openapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "openapi")))]
pub use idem_runtime::openapi;

#[cfg(feature = "decimal")]
#[cfg_attr(docsrs, doc(cfg(feature = "decimal")))]
pub use idem_runtime::deserialize;

/// Guides for adopters (also in `docs/guides/` of the repository): choosing a contract, a TTL
/// and a lease, passing the operation id downstream, adding idem to an axum, actix-web or tonic
/// service, running several instances, coming from other idempotency implementations, and
/// writing clients that retry with `idem-client`.
pub mod guide {
    #[doc = include_str!("../docs/guides/contracts.md")]
    pub mod contracts {}
    #[doc = include_str!("../docs/guides/ttl-and-lease.md")]
    pub mod ttl_and_lease {}
    #[doc = include_str!("../docs/guides/outbox.md")]
    pub mod outbox {}
    #[doc = include_str!("../docs/guides/several-instances.md")]
    pub mod several_instances {}
    #[doc = include_str!("../docs/guides/axum-postgres.md")]
    pub mod axum_postgres {}
    #[doc = include_str!("../docs/guides/coming-from-stripe-and-powertools.md")]
    pub mod coming_from_stripe_and_powertools {}
    #[doc = include_str!("../docs/guides/clients.md")]
    pub mod clients {}
    #[doc = include_str!("../docs/guides/actix.md")]
    #[cfg(feature = "actix")]
    #[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
    pub mod actix {}
    #[doc = include_str!("../docs/guides/tonic.md")]
    #[cfg(feature = "tonic")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
    pub mod tonic {}
}

#[doc(hidden)]
pub use idem_runtime::__private;
