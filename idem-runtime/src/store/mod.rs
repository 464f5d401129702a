//! Claim stores: the storage half of idem.
//!
//! A [`Store`] keeps one record per [`ScopedKey`](crate::key::ScopedKey) and answers one question atomically: *may this
//! request run?* ([`Store::claim`]). The answer is a [`Claim`]:
//!
//! * [`Claim::Acquired`]: this request owns the key now (a fresh key, an expired record replaced,
//!   or an expired lease taken over). Run the handler, then [`Store::complete`] with the response
//!   snapshot, or [`Store::release`] when nothing was done and a corrected retry must be able to
//!   run (Stripe's "validation failed, nothing saved", S2).
//! * [`Claim::Completed`]: a stored snapshot; the engine compares its `request_hash` with the
//!   request's own (a mismatch is `422`, S7) and replays it.
//! * [`Claim::InProgress`]: another request holds a live lease: `409` + `Retry-After` (S8).
//!
//! Every backend claims through the unique index on `key_hash` (`uk_idem_key`) with one atomic
//! statement, never check-then-insert (S13-S16); claims commit at once and completion is one
//! short statement (S18). Records carry a lease and a fencing token (S23) and an `expire_at`
//! after which they are logically absent (S19-S21). The design, the SQL of every backend and the
//! number of statements of each path are in `docs/storage.md`.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use core::time::Duration;
//! use idem_runtime::RequestHash;
//! use idem_runtime::key::ScopedKey;
//! use idem_runtime::store::{Claim, ClaimRequest, Completion, MemoryStore, Outcome, Store};
//!
//! let store = MemoryStore::new();
//! let key = ScopedKey::new(&["acme", "u1"], "POST /payments", "key-1")?;
//! let request_hash = RequestHash::of_bytes(br#"{"amount":100}"#);
//! let req = ClaimRequest::new(&key, request_hash, Duration::from_secs(30), Duration::from_secs(86_400));
//!
//! let Claim::Acquired(lease) = store.claim(&req).await? else { unreachable!() };
//! // ... run the handler ...
//! store.complete(&lease, &Completion::new(Outcome::Completed, 201, b"{\"id\":\"pay_1\"}".to_vec())).await?;
//!
//! // A retry replays the snapshot.
//! let Claim::Completed(record) = store.claim(&req).await? else { unreachable!() };
//! assert_eq!(record.status, Some(201));
//! assert_eq!(record.request_hash, request_hash);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub(crate) mod atomic;
mod clock;
mod connect;
mod error;
pub(crate) mod headers;
mod interface;
mod memory;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod migrate;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub(crate) mod sql_store;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;
mod sweeper;

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
)]
pub use atomic::{AnySql, SqlTx, Tx, TxStore};
pub use clock::{Clock, MAX_DURATION, ManualClock, SystemClock, Timestamp};
pub use connect::{ConnectCause, Unreachable, masked_url};
pub(crate) use error::is_aborted_transaction;
pub use error::{BoxError, Chain, DEFAULT_RETRY_AFTER, StoreError};
pub use interface::{
    BoxFuture, Claim, ClaimRequest, Completion, Lease, Outcome, Record, RecordState, Store,
};
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
)]
pub use sql_store::begin_cancel_safe;

pub(crate) use interface::new_operation_id;
pub use memory::MemoryStore;
pub use sweeper::{Sweeper, SweeperHandle};

// Each backend's store stands in its own module (with its SQL text), and at the root of `idem`.
#[cfg(feature = "mysql")]
pub(crate) use mysql::MySqlStore;
#[cfg(feature = "postgres")]
pub(crate) use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::SqliteStore;
