//! The two pools of a [`SqliteStore`](super::SqliteStore): the reading pool, and the pool of
//! one connection that every write goes through.

use core::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use super::{classify, locked};
use crate::store::error::StoreError;

/// SQLite's automatic checkpoint threshold on the writer connection, in pages (SQLite's
/// default is 1,000): only a backstop, which the store's own checkpoints keep from running.
pub(super) const WRITER_AUTOCHECKPOINT: &str = "2000";

/// The pool of the store's writer connection: `pool_options` and `options` for one connection,
/// with [`WRITER_AUTOCHECKPOINT`]; `None` when `pool_options` allows one connection only, which
/// then takes the writes too.
pub(super) fn writer(
    pool_options: &SqlitePoolOptions,
    options: &SqliteConnectOptions,
) -> Option<SqlitePool> {
    (pool_options.get_max_connections() > 1).then(|| {
        pool_options
            .clone()
            .max_connections(1)
            .min_connections(0)
            .connect_lazy_with(
                options
                    .clone()
                    .pragma("wal_autocheckpoint", WRITER_AUTOCHECKPOINT),
            )
    })
}

/// Connects `pool_options`' pool, its first connection opened again while SQLite answers
/// `SQLITE_BUSY`, until the pool's acquire timeout. Several processes starting together on a
/// new file: the first to open it turns it to WAL (`journal_mode`, set on every connection), a
/// change that takes an exclusive lock without waiting in the busy handler, so another process
/// opening the file at that moment met "database is locked" at once and did not start. Once the
/// file is in WAL mode, opening it takes no such lock.
pub(super) async fn open(
    pool_options: SqlitePoolOptions,
    options: SqliteConnectOptions,
) -> Result<SqlitePool, StoreError> {
    let deadline = std::time::Instant::now() + pool_options.get_acquire_timeout();
    loop {
        match pool_options.clone().connect_with(options.clone()).await {
            Err(sqlx::Error::Database(db))
                if locked(&*db) && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            pool => return pool.map_err(classify),
        }
    }
}
