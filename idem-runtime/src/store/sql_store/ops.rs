//! The [`Store`](crate::store::interface::Store) operations that every SQL store performs alike, generic
//! over its [`SqlBackend`]: each backend's `impl Store` forwards to these, and keeps `claim` and
//! `purge_expired`, whose statements differ in shape, to itself.

use core::time::Duration;

use sqlx::{Connection, Database};

use super::backend::{FITS_EVERY_SERVER, SqlBackend, SqlCore};
use super::row::fence_param;
use crate::key::ScopedKey;
use crate::store::error::StoreError;
use crate::store::headers::encode_headers;
use crate::store::interface::{Completion, Lease, Record, RecordState};

/// How many times a claim re-runs when the record changed between its statements (a purge, a
/// concurrent takeover); each retry starts from a fresh read.
pub(crate) const CLAIM_ATTEMPTS: u32 = 8;

/// `Store::complete`: one `UPDATE`, and when it matched no row, one `SELECT` of the owner
/// (see [`completed_earlier`]).
pub(crate) async fn complete<B: SqlBackend>(
    store: &B,
    lease: &Lease,
    completion: &Completion,
) -> Result<(), StoreError> {
    completion.validate()?;
    let core = store.core();
    if too_large_to_assume(completion) {
        let limit = if B::ASKS_LIMIT {
            core.send(|| async {
                let mut conn = core.pool.acquire().await?;
                B::completion_limit(&mut conn).await
            })
            .await?
        } else {
            B::VALUE_LIMIT
        };
        completion.fits(limit)?;
    }
    let headers = encode_headers(&completion.headers);
    let (fence, now) = (fence_param(lease.fence)?, core.now_param());
    let done = core
        .send(|| async {
            let mut conn = core.write_conn().await?;
            let written = B::complete(
                &mut conn,
                lease,
                fence,
                completion,
                &headers,
                now,
                core.causal,
            )
            .await;
            conn.settle(written)
        })
        .await?;
    if done == 1 {
        return Ok(());
    }
    let owner = core
        .send(|| async {
            let mut conn = core.pool.acquire().await?;
            B::owner(&mut conn, &lease.key, core.causal).await
        })
        .await?;
    completed_earlier(owner, lease)
}

/// Whether `completion` is too large to assume that every server keeps it: then the store checks
/// it against the server's limit ([`Completion::fits`]) and refuses it before anything is
/// written (`StoreError::TooLarge`): the `UPDATE` would fail the same way on every try
/// (MariaDB's error 1153), so the engine ends the lease at once instead of retrying it.
fn too_large_to_assume(completion: &Completion) -> bool {
    completion.stored_bytes() > FITS_EVERY_SERVER
}

/// `complete_in` of every SQL store: the same statements as [`complete`] on the caller's
/// connection, counted, never retried (a deadlock aborted the caller's whole transaction).
pub(crate) async fn complete_in<B: SqlBackend>(
    store: &B,
    conn: &mut <B::Db as Database>::Connection,
    lease: &Lease,
    completion: &Completion,
) -> Result<(), StoreError> {
    completion.validate()?;
    let core = store.core();
    if too_large_to_assume(completion) {
        // On the caller's connection: taking another from the pool could wait for one that
        // the callers' open transactions all hold.
        let limit = if B::ASKS_LIMIT {
            core.statements.add(1);
            B::completion_limit(&mut *conn).await.map_err(B::classify)?
        } else {
            B::VALUE_LIMIT
        };
        completion.fits(limit)?;
    }
    let headers = encode_headers(&completion.headers);
    let fence = fence_param(lease.fence)?;
    core.statements.add(1);
    let done = B::complete(
        &mut *conn,
        lease,
        fence,
        completion,
        &headers,
        core.now_param(),
        core.causal,
    )
    .await
    .map_err(B::classify)?;
    if done == 1 {
        return Ok(());
    }
    core.statements.add(1);
    let owner = B::owner(&mut *conn, &lease.key, core.causal)
        .await
        .map_err(B::classify)?;
    completed_earlier(owner, lease)
}

/// `Store::release`: deletes the record of an attempt declared effect-free (nothing was saved,
/// S2). Only the lease that owns it (same fence and operation id, still processing) can, so a
/// record taken over, completed or replaced is never deleted by a stale lease. No expiry
/// condition: a record nobody superseded is still this lease's, expired or not.
pub(crate) async fn release<B: SqlBackend>(
    core: &SqlCore<B>,
    lease: &Lease,
) -> Result<(), StoreError> {
    let fence = fence_param(lease.fence)?;
    let rows = core
        .send(|| async {
            let mut conn = core.write_conn().await?;
            let written = B::release(&mut conn, lease, fence, core.causal).await;
            conn.settle(written)
        })
        .await?;
    fenced_unless_one(rows, lease)
}

/// `Store::abandon`: ends the lease at once, keeping the record and its operation id.
pub(crate) async fn abandon<B: SqlBackend>(
    core: &SqlCore<B>,
    lease: &Lease,
) -> Result<(), StoreError> {
    let fence = fence_param(lease.fence)?;
    let now = core.now_param();
    let rows = core
        .send(|| async {
            let mut conn = core.write_conn().await?;
            let written = B::abandon(&mut conn, lease, fence, now, core.causal).await;
            conn.settle(written)
        })
        .await?;
    fenced_unless_one(rows, lease)
}

/// `Store::extend`: renews the lease for `by` from the database's "now".
pub(crate) async fn extend<B: SqlBackend>(
    core: &SqlCore<B>,
    lease: &Lease,
    by: Duration,
) -> Result<Lease, StoreError> {
    let (fence, now, by_ms) = (
        fence_param(lease.fence)?,
        core.now_param(),
        super::row::millis_param(by),
    );
    let out = core
        .send(|| async {
            let mut conn = core.write_conn().await?;
            let written = B::extend(&mut conn, lease, fence, by_ms, now, core.causal).await;
            conn.settle(written)
        })
        .await?;
    B::extended(out, lease, by)
}

/// The renewed lease from the `(lease_until, expire_at)` an `UPDATE .. RETURNING` read back
/// (`None`: the lease no longer owns the record).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn returned_lease(
    returned: Option<(i64, i64)>,
    lease: &Lease,
) -> Result<Lease, StoreError> {
    let Some((lease_until, expire_at)) = returned else {
        return Err(fenced_out(lease));
    };
    Ok(Lease {
        lease_until: crate::store::clock::Timestamp::from_millis(lease_until),
        expire_at: crate::store::clock::Timestamp::from_millis(expire_at),
        ..lease.clone()
    })
}

/// `Store::get_with_now`: the record of `key` unless it has expired by the database's "now",
/// with that "now".
pub(crate) async fn get<B: SqlBackend>(
    core: &SqlCore<B>,
    key: &ScopedKey,
) -> Result<Option<(Record, crate::store::clock::Timestamp)>, StoreError> {
    Ok(core
        .select(key)
        .await?
        .filter(|s| !s.record.is_expired(s.now))
        .map(|s| (s.record, s.now)))
}

/// `Store::migrate`: on a connection of its own, out of the pool, closed afterwards: the lock
/// with which the backend's `migrate_on` serializes concurrent migrations belongs to the
/// connection.
pub(crate) async fn migrate<B: SqlBackend>(core: &SqlCore<B>) -> Result<(), StoreError> {
    let mut conn = core
        .pool
        .acquire()
        .await
        .map_err(|e| crate::store::migrate::migrate_error("cannot connect", e))?
        .detach();
    let result = B::migrate_on(&mut conn, core.causal).await;
    let _ = conn.close().await;
    result
}

/// The outcome of a `release` / `abandon` / `extend` statement that matched `rows` rows on
/// `key_hash`, `fence`, `operation_id` and state processing: 1 is success, 0 means the lease no
/// longer owns the record (every such statement also bumps `rev`, so a matched row is always a
/// changed row).
pub(crate) fn fenced_unless_one(rows: u64, lease: &Lease) -> Result<(), StoreError> {
    match rows {
        1 => Ok(()),
        0 => Err(fenced_out(lease)),
        n => Err(StoreError::Config {
            message: format!(
                "{n} rows matched one key hash: the unique index on `key_hash` is missing; \
                 run the store's migrations"
            ),
            source: None,
        }),
    }
}

/// The error of a lease that no longer owns its record.
pub(crate) fn fenced_out(lease: &Lease) -> StoreError {
    StoreError::FencedOut {
        key_hash: lease.key.hash_hex().to_string(),
        fence: lease.fence,
    }
}

/// Settles a completion whose `UPDATE` matched no row, from the record's `(state, fence,
/// operation_id)` read afterwards: when it is stored (completed or failed-but-stored) under this
/// lease's fence and operation id, an earlier completion of this very lease landed and only its
/// acknowledgement was lost (a dropped connection, a retry by the engine): `Ok`, and the stored
/// snapshot stays as the first completion wrote it. Anything else (taken over, released,
/// replaced, purged) is [`StoreError::FencedOut`].
pub(crate) fn completed_earlier(
    owner: Option<(i64, i64, String)>,
    lease: &Lease,
) -> Result<(), StoreError> {
    match owner {
        // A state no build writes (another writer's row) is not "stored": fenced out, never a
        // completion acknowledged for a snapshot that is not there.
        Some((state, fence, operation_id))
            if RecordState::from_code(state).is_some_and(|s| s != RecordState::Processing)
                && u64::try_from(fence) == Ok(lease.fence)
                && operation_id == lease.operation_id =>
        {
            Ok(())
        }
        _ => Err(fenced_out(lease)),
    }
}

/// The error of a claim that kept finding its record changed under it.
pub(crate) fn contended(key: &ScopedKey) -> StoreError {
    StoreError::Unavailable {
        source: format!(
            "the record with key hash {} changed under {CLAIM_ATTEMPTS} claim attempts in a row",
            key.hash_hex()
        )
        .into(),
        retry_after: Duration::from_millis(100),
    }
}
