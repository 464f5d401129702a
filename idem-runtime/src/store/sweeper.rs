//! [`Sweeper`]: a background task that purges expired records in bounded batches.

use core::time::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::error::StoreError;
use super::interface::Store;
use crate::telemetry;

/// Periodically calls [`Store::purge_expired`] so that expired records (already logically
/// absent, S21) are also physically deleted.
///
/// Each tick deletes batches of `batch` records until a batch comes back short or
/// `max_batches_per_tick` batches ran, so one tick never holds locks for long nor runs forever.
/// A failing tick (the database is down) is counted and retried at the next tick.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use core::time::Duration;
/// use std::sync::Arc;
/// use idem_runtime::store::{MemoryStore, Sweeper};
///
/// let store = Arc::new(MemoryStore::new());
/// let handle = Sweeper::new(store).interval(Duration::from_secs(60)).batch(1_000).spawn();
/// // ... serve ...
/// handle.stop().await;
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Sweeper {
    store: Arc<dyn Store>,
    interval: Duration,
    batch: u32,
    max_batches_per_tick: u32,
}

impl Sweeper {
    /// A sweeper of `store`: every 60 s, batches of 1000, at most 100 batches per tick.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Sweeper {
            store,
            interval: Duration::from_secs(60),
            batch: 1_000,
            max_batches_per_tick: 100,
        }
    }

    /// Time between ticks.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Records deleted per statement (at least 1).
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Upper bound of batches per tick (at least 1).
    pub fn max_batches_per_tick(mut self, n: u32) -> Self {
        self.max_batches_per_tick = n.max(1);
        self
    }

    /// Runs one tick now: purges batches of each phase until one comes back short — records
    /// past their end ([`Store::purge_expired`]), then responses of remembered records past
    /// their TTL ([`Store::purge_responses`]); returns the number of records deleted and
    /// responses freed.
    ///
    /// # Errors
    /// The first error of either phase.
    pub async fn sweep_once(&self) -> Result<u64, StoreError> {
        let backend = self.store.backend();
        let mut total = 0;
        for phase in ["records", "responses"] {
            for _ in 0..self.max_batches_per_tick {
                let batch = match phase {
                    "records" => self.store.purge_expired(self.batch),
                    _ => self.store.purge_responses(self.batch),
                };
                let n = telemetry::store_call(backend, "purge", batch).await?;
                telemetry::purged(backend, phase, n);
                total += n;
                if n < u64::from(self.batch) {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// Spawns the sweeper on the current tokio runtime. The first tick runs at once. Dropping
    /// the handle also stops the task.
    ///
    /// # Panics
    /// Outside a tokio runtime (like [`tokio::spawn`]).
    pub fn spawn(self) -> SweeperHandle {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let stats = Arc::new(Stats::default());
        let task_stats = stats.clone();
        let task = tokio::spawn(async move {
            loop {
                match self.sweep_once().await {
                    Ok(n) => {
                        task_stats.purged.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(_) => {
                        task_stats.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                task_stats.ticks.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(self.interval) => {}
                }
            }
        });
        SweeperHandle {
            stop: Some(stop),
            task,
            stats,
        }
    }
}

#[derive(Debug, Default)]
struct Stats {
    purged: AtomicU64,
    errors: AtomicU64,
    ticks: AtomicU64,
}

/// The running [`Sweeper`]; stop it with [`SweeperHandle::stop`] (or drop it).
#[derive(Debug)]
pub struct SweeperHandle {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    stats: Arc<Stats>,
}

impl SweeperHandle {
    /// Records deleted so far.
    pub fn purged(&self) -> u64 {
        self.stats.purged.load(Ordering::Relaxed)
    }

    /// Ticks that failed so far.
    pub fn errors(&self) -> u64 {
        self.stats.errors.load(Ordering::Relaxed)
    }

    /// Ticks run so far.
    pub fn ticks(&self) -> u64 {
        self.stats.ticks.load(Ordering::Relaxed)
    }

    /// Stops the task after its current tick and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}
