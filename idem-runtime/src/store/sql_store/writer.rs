//! The writer connection: one connection of a pool of its own, kept between writes, that
//! every write of a store goes through (SQLite's; the other stores write through their pool).

use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};

/// The one connection of a pool of its own that every write goes through, taken from that pool
/// once and kept between writes: writes queue for it in order (a fair lock), and none pays for
/// the pool's hand-over. sqlx checks a connection it takes back (a `ping`, on SQLite a round
/// trip to the connection's thread), and the next write could not start before that check
/// ended. The connection goes back to its pool (and so through that check) only after a write
/// that failed or was given up on (a dropped future), where the check is what makes it safe to
/// reuse; the next write takes it again.
pub(super) struct HeldWriter<DB: Database> {
    pool: Pool<DB>,
    conn: Arc<tokio::sync::Mutex<Held<DB>>>,
}

/// The held writer connection, when one is held; given back to its pool when dropped (the last
/// clone of the store gone).
pub(crate) struct Held<DB: Database>(Option<PoolConnection<DB>>);

impl<DB: Database> Held<DB> {
    /// Gives the connection back to its pool. sqlx hands a connection back in a task of its own
    /// and panics without a tokio runtime to spawn it on: a store can outlive its runtime (kept
    /// beside it, dropped after it), so outside one the connection is closed instead.
    fn give_back(&mut self) {
        let Some(conn) = self.0.take() else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(conn);
        } else {
            drop(conn.detach());
        }
    }
}

impl<DB: Database> Drop for Held<DB> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl<DB: Database> HeldWriter<DB> {
    pub(super) fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
            conn: Arc::new(tokio::sync::Mutex::new(Held(None))),
        }
    }

    /// The pool the connection is taken from.
    pub(super) fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The held connection, once the writes before have ended; taken from the pool when none
    /// is held.
    pub(super) async fn take(&self) -> Result<WriteConn<DB>, sqlx::Error> {
        let mut guard = Arc::clone(&self.conn).lock_owned().await;
        if guard.0.is_none() {
            guard.0 = Some(self.pool.acquire().await?);
        }
        Ok(WriteConn::Held { guard, keep: false })
    }
}

impl<DB: Database> Clone for HeldWriter<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            conn: Arc::clone(&self.conn),
        }
    }
}

/// A connection for one write: one of the store's pool, or the held writer (see
/// [`HeldWriter`]). Dereferences to the driver's connection. [`settle`](Self::settle) it with
/// the write's result: the held writer is kept for the next write only after a write that
/// succeeded.
pub(crate) enum WriteConn<DB: Database> {
    Pooled(PoolConnection<DB>),
    Held {
        guard: tokio::sync::OwnedMutexGuard<Held<DB>>,
        keep: bool,
    },
}

impl<DB: Database> WriteConn<DB> {
    /// Passes `result` through, noting whether the write succeeded.
    pub(crate) fn settle<T>(&mut self, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        if let WriteConn::Held { keep, .. } = self {
            *keep = result.is_ok();
        }
        result
    }
}

impl<DB: Database> core::ops::Deref for WriteConn<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match self {
            WriteConn::Pooled(conn) => conn,
            WriteConn::Held { guard, .. } => guard.0.as_ref().expect("held while the guard lives"),
        }
    }
}

impl<DB: Database> core::ops::DerefMut for WriteConn<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self {
            WriteConn::Pooled(conn) => conn,
            WriteConn::Held { guard, .. } => guard.0.as_mut().expect("held while the guard lives"),
        }
    }
}

impl<DB: Database> Drop for WriteConn<DB> {
    fn drop(&mut self) {
        if let WriteConn::Held { guard, keep: false } = self {
            // Back to its pool, which checks it (waiting for a statement given up on to end)
            // before the next write takes it again.
            guard.give_back();
        }
    }
}
