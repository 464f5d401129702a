//! The WAL checkpoints a [`SqliteStore`](super::SqliteStore) runs itself, on a task of its own,
//! so that no request's commit pays for SQLite's automatic one (`docs/storage.md`, "SQLite").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::SqliteStore;
use crate::store::sql_store::SqlCore;

/// Writes between two checkpoints run by the store: few enough that one of them sees the log
/// pass [`HOLD_WRITES_FROM`] well before
/// [`WRITER_AUTOCHECKPOINT`](super::pools::WRITER_AUTOCHECKPOINT).
const CHECKPOINT_EVERY: u64 = 128;

/// The log size, in frames, from which the checkpoint holds the writes back to finish (see
/// [`checkpoint`]): far enough below
/// [`WRITER_AUTOCHECKPOINT`](super::pools::WRITER_AUTOCHECKPOINT) for the frames of a checkpoint
/// interval and the writes that land during the first step.
const HOLD_WRITES_FROM: i64 = 1_000;

/// The store's own checkpoints, shared by its clones.
#[derive(Debug, Default)]
pub(super) struct Checkpoints {
    /// Writes that changed the database.
    writes: AtomicU64,
    /// A checkpoint task is running: no second one.
    running: AtomicBool,
    /// Checkpoints run so far (diagnostics).
    done: AtomicU64,
}

impl Checkpoints {
    /// Counts a write that changed the database, and every [`CHECKPOINT_EVERY`] writes starts
    /// the [`checkpoint`] on a task of its own, unless one is running or there is no tokio
    /// runtime (SQLite's automatic checkpoint then does it, as without this). A failed
    /// checkpoint is left to the next one, or to the automatic one: it loses nothing.
    pub(super) fn wrote(self: &Arc<Self>, core: &SqlCore<SqliteStore>) {
        let writes = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if !writes.is_multiple_of(CHECKPOINT_EVERY) || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.running.store(false, Ordering::Release);
            return;
        };
        let (core, checkpoints) = (core.clone(), Arc::clone(self));
        runtime.spawn(async move {
            if let Err(e) = checkpoint(&core).await {
                tracing::debug!(target: "idem", error = %e, "background WAL checkpoint failed");
            } else {
                checkpoints.done.fetch_add(1, Ordering::Relaxed);
            }
            checkpoints.running.store(false, Ordering::Release);
        });
    }

    /// Checkpoints run so far.
    pub(super) fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

/// The store's checkpoint: a passive one on a reading
/// connection, which copies the log while the writer goes on; then, once the log has grown to
/// [`HOLD_WRITES_FROM`] frames, a second one on the writer's connection, which copies the
/// frames written meanwhile with the writes held back, so that the next write restarts the
/// log. A log written to without a pause is never fully copied by the first step alone (frames
/// keep arriving while it runs): it would grow until SQLite's automatic checkpoint ran inside
/// a request's commit.
async fn checkpoint(core: &SqlCore<SqliteStore>) -> Result<(), sqlx::Error> {
    const CHECKPOINT: &str = "PRAGMA wal_checkpoint(PASSIVE)";
    // (busy, frames in the log, frames copied); -1, -1 when the file is not in WAL mode.
    let (_, log, _): (i64, i64, i64) = sqlx::query_as(CHECKPOINT).fetch_one(&core.pool).await?;
    if log >= HOLD_WRITES_FROM {
        let mut conn = core.write_conn().await?;
        let written = sqlx::query(CHECKPOINT).execute(&mut *conn).await;
        conn.settle(written)?;
    }
    Ok(())
}
