//! The machinery the SQL stores ([`PostgresStore`](super::postgres::PostgresStore),
//! [`MySqlStore`](super::mysql::MySqlStore), [`SqliteStore`](super::sqlite::SqliteStore)) share, split by what
//! it is:
//!
//! * `row`: the columns every backend reads, the checked conversion of a row into a
//!   [`Record`](super::interface::Record), the integer parameters;
//! * `send`: sending statements (each counted, and sent again when the database rolled it
//!   back), beginning transactions that may be given up on, checking idle pooled connections;
//! * `backend`: what a backend supplies ([`SqlBackend`]: its statements, row decoding and error
//!   classification) and the state every SQL store holds ([`SqlCore`]);
//! * `ops`: the [`Store`](super::interface::Store) operations performed alike over any backend;
//! * `shared`: the statement methods that backends bind alike (`lease_statements!`,
//!   `numbered_statements!`);
//! * `store`: the `Store` impl of every SQL store (`impl_store!`), over `ops` and the backend.
//!
//! Dependencies run one way: `ops` → `backend` → `row` → `store::headers`, and `backend` →
//! `send`; the backend modules (`store::postgres`, ...) use this module, never the other
//! way round.

mod backend;
pub(crate) mod ops;
mod row;
mod send;
mod shared;
mod store;
mod writer;

pub(crate) use backend::{SqlBackend, SqlCore};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use row::Stored;
pub(crate) use row::{RawRecord, millis_param, record_columns};
pub use send::begin_cancel_safe;
pub(crate) use send::begin_cancel_safe_with;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use send::{connect_pool, ping_when_idle};
pub(crate) use shared::lease_statements;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use shared::numbered_statements;
pub(crate) use store::impl_store;
