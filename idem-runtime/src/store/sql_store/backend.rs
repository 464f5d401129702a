//! What a SQL backend supplies ([`SqlBackend`]) and the state every SQL store holds
//! ([`SqlCore`]).
//!
//! The trait works at the level of statements: each backend binds its own statements (the
//! order and integer types of their parameters are its quirks: MySQL binds positionally, once
//! per occurrence) on a concrete connection, decodes its own rows, and hands back plain values
//! (rows affected, a [`RawRecord`]). The generic functions in `ops` do the rest — validation,
//! counting, retrying, fencing decisions — without naming a single sqlx trait bound: generic
//! sqlx code would need higher-ranked `Executor` bounds on every function, and the rows
//! affected of a statement have no generic accessor. A statement on the pool acquires a
//! connection and runs on it, which is what sqlx's `Executor for &Pool` does.

use core::fmt;
use core::future::Future;
use core::time::Duration;
use std::sync::Arc;

use sqlx::{Database, Pool};

use super::row::{RawRecord, Stored};
use super::send::{StatementCounter, send_retrying};
use super::writer::{HeldWriter, WriteConn};
use crate::key::ScopedKey;
use crate::store::clock::{Clock, SystemClock};
use crate::store::error::StoreError;
use crate::store::interface::{Claim, ClaimRequest, Completion, Lease};

/// A completion this large fits every server's limits as configured in practice (MariaDB's
/// smallest usual `max_allowed_packet` is 1 MiB; 16 MiB by default): no need to ask
/// [`SqlBackend::completion_limit`].
pub(crate) const FITS_EVERY_SERVER: u64 = 1 << 20;

/// A SQL database as the generic store functions see it. Every statement method sends one
/// statement on `conn` (a connection of the pool, or the caller's transaction)
/// and returns what it read, undecided; the caller counts, retries and
/// classifies.
pub(crate) trait SqlBackend: Sized + Send + Sync + 'static {
    /// The sqlx database.
    type Db: Database;

    /// The store's [`Store::backend`](crate::store::interface::Store::backend) name.
    const NAME: &'static str;

    /// The state the store holds.
    fn core(&self) -> &SqlCore<Self>;

    /// [`Store::claim`](crate::store::interface::Store::claim), whose statements differ in
    /// shape on every backend.
    fn claim_key(
        &self,
        req: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// [`Store::purge_expired`](crate::store::interface::Store::purge_expired), likewise.
    fn purge_batch(&self, batch: u32) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// [`Store::purge_responses`](crate::store::interface::Store::purge_responses), likewise.
    fn purge_responses_batch(
        &self,
        batch: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Whether [`completion_limit`](Self::completion_limit) asks the server (one statement);
    /// otherwise it is [`VALUE_LIMIT`](Self::VALUE_LIMIT).
    const ASKS_LIMIT: bool = false;

    /// The most the server keeps in one value: 1 GB by default, as PostgreSQL (`bytea`) and
    /// SQLite (`SQLITE_MAX_LENGTH`) do.
    const VALUE_LIMIT: u64 = 1_000_000_000;

    /// The largest completion ([`Completion::stored_bytes`]) the server keeps on `conn`,
    /// asked only for a completion over [`FITS_EVERY_SERVER`] and when
    /// [`ASKS_LIMIT`](Self::ASKS_LIMIT).
    fn completion_limit(
        conn: &mut <Self::Db as Database>::Connection,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send {
        let _ = conn;
        std::future::ready(Ok(Self::VALUE_LIMIT))
    }

    /// Called after each completion, release, abandon or extension that succeeded: a write
    /// that changed the database. Nothing by default; SQLite counts them for its checkpoints.
    fn wrote(&self) {}

    /// `result`, calling [`wrote`](Self::wrote) when it is `Ok`.
    fn written<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if result.is_ok() {
            self.wrote();
        }
        result
    }

    /// What [`SqlBackend::extend`] reads back, turned into the renewed lease by
    /// [`SqlBackend::extended`].
    type Extended: Send;

    /// The row of `key`, expired or not, with the database's "now" (`now`: the clock override).
    /// `causal` (here and below): the statement waits until the server has applied every write
    /// its cluster committed before it ([`SqlCore::causal`]).
    fn select<'e>(
        conn: &'e mut <Self::Db as Database>::Connection,
        key: &'e ScopedKey,
        now: Option<i64>,
        causal: bool,
    ) -> impl Future<Output = Result<Option<RawRecord>, sqlx::Error>> + Send;

    /// The completion `UPDATE` of `lease` (fence, operation id, state processing): rows
    /// affected.
    fn complete<'e>(
        conn: &'e mut <Self::Db as Database>::Connection,
        lease: &'e Lease,
        fence: i64,
        completion: &'e Completion,
        headers: &'e [u8],
        now: Option<i64>,
        causal: bool,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// `(state, fence, operation_id)` of the record of `key`.
    fn owner<'e>(
        conn: &'e mut <Self::Db as Database>::Connection,
        key: &'e ScopedKey,
        causal: bool,
    ) -> impl Future<Output = Result<Option<(i64, i64, String)>, sqlx::Error>> + Send;

    /// Deletes the record `lease` owns (fence, operation id, state processing): rows affected.
    fn release<'e>(
        conn: &'e mut <Self::Db as Database>::Connection,
        lease: &'e Lease,
        fence: i64,
        causal: bool,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Ends the lease at once, keeping the record: rows affected.
    fn abandon<'e>(
        conn: &'e mut <Self::Db as Database>::Connection,
        lease: &'e Lease,
        fence: i64,
        now: Option<i64>,
        causal: bool,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Renews `lease` for `by_ms` ms from now.
    fn extend<'e>(
        conn: &'e mut <Self::Db as Database>::Connection,
        lease: &'e Lease,
        fence: i64,
        by_ms: i64,
        now: Option<i64>,
        causal: bool,
    ) -> impl Future<Output = Result<Self::Extended, sqlx::Error>> + Send;

    /// The lease renewed by `by`, from what [`SqlBackend::extend`] read back, or
    /// [`StoreError::FencedOut`].
    fn extended(out: Self::Extended, lease: &Lease, by: Duration) -> Result<Lease, StoreError>;

    /// Applies the pending migrations on `conn`, a connection of its own; `causal`: what the
    /// store was told of its server ([`SqlCore::causal`]).
    fn migrate_on(
        conn: &mut <Self::Db as Database>::Connection,
        causal: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The [`StoreError`] of a driver error (transient ones are `Unavailable`).
    fn classify(err: sqlx::Error) -> StoreError;

    /// `true` when the database rolled the statement back (deadlock victim, serialization
    /// failure): it had no effect and is sent again.
    fn retryable(err: &sqlx::Error) -> bool;
}

/// What every SQL store holds: the pool, the connection its writes go through, the clock
/// override and the statement counter.
pub(crate) struct SqlCore<B: SqlBackend> {
    pub pool: Pool<B::Db>,
    /// Where the store's writes go: `pool` itself (`None`), except on SQLite, whose writers are
    /// serialized by the database anyway and queue better in one connection of their own
    /// (`docs/storage.md`, "SQLite").
    writer: Option<HeldWriter<B::Db>>,
    pub clock: Option<Arc<dyn Clock>>,
    pub statements: Arc<StatementCounter>,
    /// Whether the statements that read or change an existing record wait until the server has
    /// applied every write its cluster committed before them: on a multi-primary cluster
    /// (MariaDB Galera), where a node applies the other nodes' writes a moment after they
    /// commit, and a pool's connections may reach different nodes.
    pub causal: bool,
}

impl<B: SqlBackend> SqlCore<B> {
    pub(crate) fn new(pool: Pool<B::Db>) -> Self {
        Self::with_writes(pool, None)
    }

    /// A core whose writes go through one connection taken from `writer` (see [`HeldWriter`])
    /// and whose reads through `pool`.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn with_writer(pool: Pool<B::Db>, writer: Pool<B::Db>) -> Self {
        Self::with_writes(pool, Some(HeldWriter::new(writer)))
    }

    fn with_writes(pool: Pool<B::Db>, writer: Option<HeldWriter<B::Db>>) -> Self {
        Self {
            pool,
            writer,
            clock: None,
            statements: Arc::default(),
            causal: false,
        }
    }

    /// A connection for a write statement: the held writer, or one of the pool. Closing
    /// [`pool`](Self::pool) (what a user does to shut the store down, or a test to take it
    /// away) closes the writes too: they fail as on a closed pool.
    pub(crate) async fn write_conn(&self) -> Result<WriteConn<B::Db>, sqlx::Error> {
        if self.pool.is_closed() {
            return Err(sqlx::Error::PoolClosed);
        }
        match &self.writer {
            Some(writer) => writer.take().await,
            None => Ok(WriteConn::Pooled(self.pool.acquire().await?)),
        }
    }

    /// The clock override bound into every statement: `NULL` (the server's clock decides)
    /// unless `with_clock` set one.
    pub(crate) fn now_param(&self) -> Option<i64> {
        self.clock.as_ref().map(|c| c.now().as_millis())
    }

    /// The clock decisions are taken by: the override, or the system's.
    pub(crate) fn clock(&self) -> &dyn Clock {
        match &self.clock {
            Some(clock) => &**clock,
            None => &SystemClock,
        }
    }

    /// Sends a statement, retried when it was a deadlock victim (see
    /// [`send_retrying`]), counted, its error classified.
    pub(crate) async fn send<T, Fut>(&self, send: impl FnMut() -> Fut) -> Result<T, StoreError>
    where
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        send_retrying(&self.statements, B::retryable, B::classify, send).await
    }

    /// The row of `key`, expired or not, with the database's "now".
    pub(crate) async fn select(&self, key: &ScopedKey) -> Result<Option<Stored>, StoreError> {
        let now = self.now_param();
        let raw = self
            .send(|| async {
                let mut conn = self.pool.acquire().await?;
                B::select(&mut conn, key, now, self.causal).await
            })
            .await?;
        raw.map(RawRecord::into_stored).transpose()
    }
}

impl<B: SqlBackend> Clone for SqlCore<B> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            writer: self.writer.clone(),
            clock: self.clock.clone(),
            statements: Arc::clone(&self.statements),
            causal: self.causal,
        }
    }
}

impl<B: SqlBackend> fmt::Debug for SqlCore<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlCore")
            .field("pool", &self.pool)
            .field("writer", &self.writer.as_ref().map(HeldWriter::pool))
            .field("clock", &self.clock)
            .field("statements", &self.statements)
            .finish()
    }
}
