//! [`Tx`] and the stores it can be opened on: the SQL half of the atomic mode.

use core::any::Any;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use super::Atomic;
use crate::store::{BoxFuture, Completion, Lease, Store, StoreError};

mod sealed {
    pub trait Sealed {}
}

/// A store whose records can be completed inside the handler's own transaction: the atomic
/// mode's [`Tx`] parameter names one. [`PostgresStore`](crate::store::PostgresStore),
/// [`MySqlStore`](crate::store::MySqlStore) and [`SqliteStore`](crate::store::SqliteStore) are, and so is
/// [`AnySql`] (whichever of the three the handle holds). Sealed: its methods are idem's.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot store a result inside the handler's transaction",
    label = "not a SQL store",
    note = "the atomic mode (`transaction = ..`) needs `Tx<PostgresStore>`, `Tx<MySqlStore>`, \
            `Tx<SqliteStore>` or `Tx<AnySql>`; with another store, drop `transaction = ..` and \
            key the handler's effects on `idem::operation_id()`"
)]
pub trait TxStore: sealed::Sealed + Send + Sync + 'static {
    /// The open transaction.
    type Transaction: Send + 'static;
    /// What `&mut *tx` gives the handler: the transaction's connection.
    type Connection: ?Sized;

    #[doc(hidden)]
    fn __connection(tx: &mut Self::Transaction) -> &mut Self::Connection;

    #[doc(hidden)]
    fn __connection_ref(tx: &Self::Transaction) -> &Self::Connection;

    /// Begins a transaction on the pool of `store`, which must be this store.
    #[doc(hidden)]
    fn __begin(store: &dyn Store) -> BoxFuture<'_, Result<Self::Transaction, StoreError>>;

    /// Writes `completion` of `lease` in `tx` (fenced: [`StoreError::FencedOut`] when the lease
    /// no longer owns the record).
    #[doc(hidden)]
    fn __complete_in<'a>(
        store: &'a dyn Store,
        tx: &'a mut Self::Transaction,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    #[doc(hidden)]
    fn __commit(tx: Self::Transaction) -> BoxFuture<'static, Result<(), StoreError>>;

    #[doc(hidden)]
    fn __rollback(tx: Self::Transaction) -> BoxFuture<'static, ()>;
}

/// The store of the handle, as `S`, or why not.
fn downcast<S: Store>(store: &dyn Store) -> Result<&S, StoreError> {
    (store as &dyn Any)
        .downcast_ref::<S>()
        .ok_or_else(|| StoreError::Config {
            message: format!(
                "the handler's `Tx<{}>` needs the handle's store to be one, and it is a {} store \
                 (`{store:?}`): make the parameter `Tx<AnySql>`, or give the handle that store",
                short_name::<S>(),
                store.backend(),
            ),
            source: None,
        })
}

fn short_name<T>() -> &'static str {
    let name = core::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}

/// `TxStore` for one concrete SQL store; `$begin` gives the statement that begins its
/// transactions (`None`: the driver's `BEGIN`).
macro_rules! tx_store {
    ($store:ty, $db:ty, $conn:ty) => {
        tx_store!($store, $db, $conn, |_: &$store| None);
    };
    ($store:ty, $db:ty, $conn:ty, $begin:expr) => {
        impl sealed::Sealed for $store {}

        impl TxStore for $store {
            type Transaction = sqlx::Transaction<'static, $db>;
            type Connection = $conn;

            fn __connection(tx: &mut Self::Transaction) -> &mut $conn {
                tx
            }

            fn __connection_ref(tx: &Self::Transaction) -> &$conn {
                tx
            }

            fn __begin(store: &dyn Store) -> BoxFuture<'_, Result<Self::Transaction, StoreError>> {
                Box::pin(async move {
                    let store = downcast::<$store>(store)?;
                    crate::store::sql_store::begin_cancel_safe_with(store.pool(), ($begin)(store))
                        .await
                        .map_err(<$store as crate::store::sql_store::SqlBackend>::classify)
                })
            }

            fn __complete_in<'a>(
                store: &'a dyn Store,
                tx: &'a mut Self::Transaction,
                lease: &'a Lease,
                completion: &'a Completion,
            ) -> BoxFuture<'a, Result<(), StoreError>> {
                Box::pin(async move {
                    downcast::<$store>(store)?
                        .complete_in(&mut **tx, lease, completion)
                        .await
                })
            }

            fn __commit(tx: Self::Transaction) -> BoxFuture<'static, Result<(), StoreError>> {
                Box::pin(async move {
                    tx.commit()
                        .await
                        .map_err(<$store as crate::store::sql_store::SqlBackend>::classify)
                })
            }

            fn __rollback(tx: Self::Transaction) -> BoxFuture<'static, ()> {
                Box::pin(async move {
                    // A rollback that fails leaves nothing committed either: the connection is
                    // closed and the database ends the transaction.
                    let _ = tx.rollback().await;
                })
            }
        }
    };
}

#[cfg(feature = "postgres")]
tx_store!(
    crate::store::PostgresStore,
    sqlx::Postgres,
    sqlx::PgConnection
);
// On a Galera node a statement inside a transaction does not wait for the node to catch up
// (`wsrep_sync_wait` applies outside transactions only), so the transaction's `BEGIN` does: the
// claim, committed through any node just before, is then visible to the completion in it.
#[cfg(feature = "mysql")]
tx_store!(
    crate::store::MySqlStore,
    sqlx::MySql,
    sqlx::MySqlConnection,
    |store: &crate::store::MySqlStore| store
        .is_galera()
        .then_some("SET STATEMENT wsrep_sync_wait = 1 FOR START TRANSACTION")
);
// A deferred `BEGIN`: SQLite's write lock, which every other write of the database (claims of
// any key included) waits for, is taken at the handler's first write and held until the commit,
// not for the whole handler. `BEGIN IMMEDIATE` made a duplicate of a slow request wait for it
// (and time out) instead of getting its 409. The price: a handler that reads before its first
// write gets `SQLITE_BUSY` when another write committed in between (WAL snapshots cannot be
// upgraded), which it answers like any database error; the retry runs again.
#[cfg(feature = "sqlite")]
tx_store!(
    crate::store::SqliteStore,
    sqlx::Sqlite,
    sqlx::SqliteConnection
);

/// [`TxStore`] for whichever SQL store the handle holds, decided per request: a handler with a
/// `Tx<AnySql>` parameter runs on PostgreSQL, MariaDB/MySQL or SQLite, and matches on
/// [`SqlTx`] to reach the connection.
#[derive(Debug, Clone, Copy)]
pub struct AnySql;

/// The transaction of a `Tx<AnySql>`: one variant per SQL store compiled in.
#[non_exhaustive]
pub enum SqlTx {
    /// A [`PostgresStore`](crate::store::PostgresStore)'s transaction.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    /// A [`MySqlStore`](crate::store::MySqlStore)'s transaction.
    #[cfg(feature = "mysql")]
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    /// A [`SqliteStore`](crate::store::SqliteStore)'s transaction.
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

impl fmt::Debug for SqlTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match self {
            #[cfg(feature = "postgres")]
            SqlTx::Postgres(_) => "postgres",
            #[cfg(feature = "mysql")]
            SqlTx::MySql(_) => "mysql",
            #[cfg(feature = "sqlite")]
            SqlTx::Sqlite(_) => "sqlite",
        };
        f.debug_tuple("SqlTx").field(&backend).finish()
    }
}

impl sealed::Sealed for AnySql {}

/// Runs `$body` with `$tx` bound to the concrete transaction of `$any` and `$store` to the
/// matching store type.
macro_rules! each_sql_tx {
    ($any:expr, |$tx:ident, $store:ident| $body:expr) => {
        match $any {
            #[cfg(feature = "postgres")]
            SqlTx::Postgres($tx) => {
                type $store = crate::store::PostgresStore;
                $body
            }
            #[cfg(feature = "mysql")]
            SqlTx::MySql($tx) => {
                type $store = crate::store::MySqlStore;
                $body
            }
            #[cfg(feature = "sqlite")]
            SqlTx::Sqlite($tx) => {
                type $store = crate::store::SqliteStore;
                $body
            }
        }
    };
}

impl TxStore for AnySql {
    type Transaction = SqlTx;
    type Connection = SqlTx;

    fn __connection(tx: &mut SqlTx) -> &mut SqlTx {
        tx
    }

    fn __connection_ref(tx: &SqlTx) -> &SqlTx {
        tx
    }

    fn __begin(store: &dyn Store) -> BoxFuture<'_, Result<SqlTx, StoreError>> {
        Box::pin(async move {
            let any = store as &dyn Any;
            #[cfg(feature = "postgres")]
            if any.is::<crate::store::PostgresStore>() {
                return <crate::store::PostgresStore as TxStore>::__begin(store)
                    .await
                    .map(SqlTx::Postgres);
            }
            #[cfg(feature = "mysql")]
            if any.is::<crate::store::MySqlStore>() {
                return <crate::store::MySqlStore as TxStore>::__begin(store)
                    .await
                    .map(SqlTx::MySql);
            }
            #[cfg(feature = "sqlite")]
            if any.is::<crate::store::SqliteStore>() {
                return <crate::store::SqliteStore as TxStore>::__begin(store)
                    .await
                    .map(SqlTx::Sqlite);
            }
            let _ = any;
            Err(StoreError::Config {
                message: format!(
                    "the handler's `Tx<AnySql>` needs a PostgreSQL, MySQL or SQLite store, and the \
                     handle holds a {} store (`{store:?}`)",
                    store.backend()
                ),
                source: None,
            })
        })
    }

    fn __complete_in<'a>(
        store: &'a dyn Store,
        tx: &'a mut SqlTx,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        each_sql_tx!(tx, |tx, S| <S as TxStore>::__complete_in(
            store, tx, lease, completion
        ))
    }

    fn __commit(tx: SqlTx) -> BoxFuture<'static, Result<(), StoreError>> {
        each_sql_tx!(tx, |tx, S| <S as TxStore>::__commit(tx))
    }

    fn __rollback(tx: SqlTx) -> BoxFuture<'static, ()> {
        each_sql_tx!(tx, |tx, S| <S as TxStore>::__rollback(tx))
    }
}

/// Where the open transaction is kept while the handler does not hold it: the engine puts it
/// there after `BEGIN`, the handler's [`Tx`] takes it when the handler starts and puts it back
/// when dropped, and the engine takes it back to complete and commit.
type Slot<S> = Arc<Mutex<Option<<S as TxStore>::Transaction>>>;

fn lock<T>(slot: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// The handler's transaction in the atomic mode (`#[idempotent(transaction = tx)]`): begun on
/// the store's pool after the claim, inside the lease; the handler writes its business rows in
/// it (`&mut *tx` is the connection), and idem writes the stored result in it and commits both
/// once the handler returns. There is no `commit`: the result commits with the rows or neither
/// does. If the handler fails, panics, times out or is cancelled, the transaction rolls back.
///
/// `S` is the handle's store ([`PostgresStore`](crate::store::PostgresStore),
/// [`MySqlStore`](crate::store::MySqlStore), [`SqliteStore`](crate::store::SqliteStore)), or [`AnySql`] for
/// a handler that runs on any of them. Keep the transaction in the handler: one that outlives it
/// (moved into a spawned task) is rolled back, and the request is answered `503`.
///
/// Choose this mode when every effect of the handler is a write in the store's database. When
/// the handler calls other systems (a payment processor, a queue, another service), those
/// effects cannot roll back with the transaction: use the default two-commit mode and key each
/// effect on the [operation id](crate::engine::operation_id), which stays the same across
/// retries. `docs/storage.md` ("The atomic mode") has every failure case.
pub struct Tx<S: TxStore> {
    tx: Option<S::Transaction>,
    slot: Slot<S>,
}

impl<S: TxStore> Tx<S> {
    /// The transaction the engine began for this request.
    fn take(slot: &TxSlot<S>) -> Self {
        Tx {
            tx: lock(&slot.0).take(),
            slot: slot.0.clone(),
        }
    }

    fn open(&mut self) -> &mut S::Transaction {
        self.tx
            .as_mut()
            .expect("the atomic mode's transaction is begun before the handler runs")
    }
}

impl<S: TxStore> Deref for Tx<S> {
    type Target = S::Connection;

    fn deref(&self) -> &S::Connection {
        let tx = self
            .tx
            .as_ref()
            .expect("the atomic mode's transaction is begun before the handler runs");
        S::__connection_ref(tx)
    }
}

impl<S: TxStore> DerefMut for Tx<S> {
    fn deref_mut(&mut self) -> &mut S::Connection {
        S::__connection(self.open())
    }
}

impl<S: TxStore> Drop for Tx<S> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            *lock(&self.slot) = Some(tx);
        }
    }
}

impl<S: TxStore> fmt::Debug for Tx<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("store", &short_name::<S>())
            .field("open", &self.tx.is_some())
            .finish()
    }
}

/// The type of the parameter `#[idempotent(transaction = ..)]` names: [`Tx`].
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a transaction idem can store a result in",
    label = "named by `transaction = ..`",
    note = "the parameter named by `transaction = ..` must be `idem::Tx<S>`, with `S` the \
            handle's store: `PostgresStore`, `MySqlStore`, `SqliteStore`, or `AnySql`"
)]
pub trait TxParam: Sized {
    /// The store the transaction is on.
    type Store: TxStore;

    /// The transaction the engine began for this request.
    fn __take(slot: &TxSlot<Self::Store>) -> Self;
}

impl<S: TxStore> TxParam for Tx<S> {
    type Store = S;

    fn __take(slot: &TxSlot<S>) -> Self {
        Tx::take(slot)
    }
}

/// The slot for the transaction of a handler whose parameter is a `T`, and the engine's side of
/// it (generated code only).
#[doc(hidden)]
pub fn tx_slot<T: TxParam>() -> (TxSlot<T::Store>, AtomicMode) {
    let slot = TxSlot::new();
    let hook = AtomicMode(Arc::new(slot.hook()));
    (slot, hook)
}

/// The engine's side of one request's transaction, whatever its store (generated code only).
#[doc(hidden)]
#[derive(Debug, Clone)]
#[cfg_attr(
    not(any(feature = "axum", feature = "actix", feature = "tonic")),
    allow(dead_code, reason = "read by the fronts")
)]
pub struct AtomicMode(pub(crate) Arc<dyn Atomic>);

/// The handler's `T`, from the slot the engine began the transaction into (generated code only).
#[doc(hidden)]
pub fn take_tx<T: TxParam>(slot: &TxSlot<T::Store>) -> T {
    T::__take(slot)
}

/// The slot of one request's transaction, made by the generated code and shared with the
/// engine's `AtomicHook`.
#[doc(hidden)]
pub struct TxSlot<S: TxStore>(Slot<S>);

impl<S: TxStore> TxSlot<S> {
    fn new() -> Self {
        TxSlot(Arc::new(Mutex::new(None)))
    }

    /// The engine's side of the slot.
    fn hook(&self) -> AtomicHook<S> {
        AtomicHook {
            slot: self.0.clone(),
            _store: PhantomData,
        }
    }
}

impl<S: TxStore> fmt::Debug for TxSlot<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxSlot").finish_non_exhaustive()
    }
}

/// The engine's side of a request's transaction: begin it, complete and commit in it, or roll
/// it back.
struct AtomicHook<S: TxStore> {
    slot: Slot<S>,
    _store: PhantomData<fn() -> S>,
}

impl<S: TxStore> fmt::Debug for AtomicHook<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicHook")
            .field("store", &short_name::<S>())
            .finish()
    }
}

impl<S: TxStore> Atomic for AtomicHook<S> {
    fn begin<'a>(&'a self, store: &'a dyn Store) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let tx = S::__begin(store).await?;
            *lock(&self.slot) = Some(tx);
            Ok(())
        })
    }

    fn commit<'a>(
        &'a self,
        store: &'a dyn Store,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let Some(mut tx) = lock(&self.slot).take() else {
                return Err(StoreError::Config {
                    message:
                        "the handler's transaction outlived the handler (moved into a task?): \
                              it was not committed, and neither was the result"
                            .to_owned(),
                    source: None,
                });
            };
            match S::__complete_in(store, &mut tx, lease, completion).await {
                Ok(()) => S::__commit(tx).await,
                Err(e) => {
                    S::__rollback(tx).await;
                    Err(e)
                }
            }
        })
    }

    fn rollback(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let tx = lock(&self.slot).take();
            if let Some(tx) = tx {
                S::__rollback(tx).await;
            }
        })
    }
}
