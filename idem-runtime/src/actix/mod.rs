//! The actix-web front of the engine (feature `actix`): what `#[idempotent]` generates for an
//! actix-web handler (written `use idem::actix::idempotent;`: its [`IdemContext`] extractor; the
//! body it generates calls the engine through `__private`), the response side of a handler
//! ([`IntoSnapshot`]), problem+json responses, a [`json_config`] whose rejections are problem
//! documents, and the [`Idempotency`] middleware for handlers that are not annotated.
//!
//! The same engine as the axum front ([`axum`](crate::axum)): the same keys, status codes,
//! problem types, headers and snapshots (`docs/http.md`, "actix-web"). actix-web's handlers and
//! responses are `!Send` and run on the worker thread that accepted the request; so do these.
//!
//! The handle comes from the application data, registered once:
//!
//! ```
//! use actix_web::{App, web};
//! use idem_runtime::engine::Idem;
//!
//! let idem = Idem::new(idem_runtime::store::MemoryStore::new());
//! let app = App::new()
//!     .app_data(web::Data::new(idem.clone()))
//!     .app_data(idem_runtime::actix::json_config());
//! # let _ = app;
//! ```

mod body;
mod context;
mod middleware;
mod respond;
pub(crate) mod run;
mod snapshot;

pub use context::IdemContext;
pub use middleware::{Idempotency, IdempotencyMiddleware};
pub use respond::{json_config, json_error};
pub use snapshot::IntoSnapshot;
