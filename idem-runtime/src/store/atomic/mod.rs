//! The atomic mode: the handler's business writes and its stored result committed in **one**
//! transaction on the store's own database ([`Tx`]).
//!
//! The rule: the stored response exists if and only if the handler's rows do. The completion is
//! written in the handler's transaction with the same fenced `UPDATE` as [`Store::complete`], and
//! anything that stops the commit (a failure without a result, a panic, a timeout, a
//! cancellation, a lease taken over) rolls both back. `docs/storage.md` ("The atomic mode") has
//! every failure case.

use core::fmt;

use super::{BoxFuture, Completion, Lease, Store, StoreError};

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod sql;

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub use sql::{AnySql, AtomicMode, SqlTx, Tx, TxParam, TxSlot, TxStore, take_tx, tx_slot};

/// What the engine does with the transaction of an atomic handler ([`Tx`], through the hook the
/// generated code makes); object-safe, so that the engine is not generic over the store.
pub(crate) trait Atomic: Send + Sync + fmt::Debug {
    /// Begins the transaction on `store` and hands it to the handler.
    fn begin<'a>(&'a self, store: &'a dyn Store) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Writes `completion` in the handler's transaction and commits both. The transaction is
    /// gone afterwards, committed or rolled back.
    fn commit<'a>(
        &'a self,
        store: &'a dyn Store,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Rolls the transaction back, if the handler did not keep it.
    fn rollback(&self) -> BoxFuture<'_, ()>;
}
