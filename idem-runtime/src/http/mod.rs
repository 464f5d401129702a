//! The HTTP front of the engine (feature `axum`): idempotent axum handlers ([`run`],
//! [`run_latest`], what `#[idempotent]` generates), problem+json responses, a JSON extractor
//! whose rejections are `400` ([`Json`]), and the tower [`IdempotencyLayer`] for handlers that
//! are not annotated.
//!
//! A hand-written idempotent handler, exactly what the attribute generates:
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use axum::{Router, routing::post, http::{Request, StatusCode}, body::Body};
//! use idem_runtime::engine::{HandlerConfig, Idem, Snapshot};
//! use idem_runtime::http::{IdemContext, Json, KeySource, run};
//! use idem_runtime::{Fingerprint, store::MemoryStore};
//! use tower::ServiceExt;
//!
//! #[derive(serde::Deserialize)]
//! struct CreatePayment { amount: u64 }
//! #[derive(serde::Serialize)]
//! struct Payment { id: String, amount: u64 }
//! impl Snapshot for Payment {
//!     const BIZ_NO_FIELD: &'static str = "id";
//!     fn biz_no(&self) -> String { self.id.clone() }
//! }
//!
//! static CREATE: HandlerConfig = HandlerConfig::new("payments::create");
//!
//! async fn create(cx: IdemContext, Json(req): Json<CreatePayment>) -> axum::response::Response {
//!     // Fingerprinted before the handler runs (here by hand; the derive does it for you).
//!     let hash = idem_runtime::RequestHash::of_canonical(|w| req.amount.write_canonical(w));
//!     run(cx, &CREATE, KeySource::Header("Idempotency-Key"), &[], hash, async move {
//!         (StatusCode::CREATED, axum::Json(Payment { id: "pay_1".into(), amount: req.amount }))
//!     })
//!     .await
//! }
//! # use idem_runtime::Canonical;
//!
//! let app = Router::new()
//!     .route("/payments", post(create))
//!     .with_state(Idem::new(MemoryStore::new()));
//! let request = || Request::post("/payments")
//!     .header("content-type", "application/json")
//!     .header("idempotency-key", "\"8e03978e\"")
//!     .body(Body::from(r#"{"amount":100}"#))
//!     .unwrap();
//! let first = app.clone().oneshot(request()).await.unwrap();
//! assert_eq!(first.status(), StatusCode::CREATED);
//! let replay = app.oneshot(request()).await.unwrap();
//! assert_eq!(replay.status(), StatusCode::CREATED);
//! assert_eq!(replay.headers()["idempotent-replayed"], "true");
//! # });
//! ```
//!
//! The status codes and problem types are documented in `docs/http.md`.

mod body;
mod context;
mod json;
mod layer;
mod respond;
mod run;
mod snapshot;

pub use context::{IdemContext, KeySource};
pub use json::{Json, JsonRejection};
pub use layer::{DEFAULT_BODY_LIMIT, Idempotency, IdempotencyLayer, ResponseFuture};
pub use run::{run, run_latest};
pub use snapshot::{IntoSnapshot, SnapshotBody};

pub use crate::engine::Snapshot;
pub use crate::engine::problem::Problem;

/// The request header of the client key (the IETF draft's and Stripe's name).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Set to `true` on every replayed response (Stripe's header; the draft names none).
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// Set to `unprotected` on a response of a `fail_open` handler that ran while the store was
/// unavailable.
pub const IDEMPOTENCY_STATUS: &str = "idempotency-status";
/// Set to `truncated` on a stored snapshot whose body was over the size limit and was replaced by
/// its business number (`{"<biz_no_field>": "<biz_no>"}`, S12).
pub const IDEMPOTENT_SNAPSHOT: &str = "idempotent-snapshot";
