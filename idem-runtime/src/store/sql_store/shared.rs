//! The [`SqlBackend`](super::SqlBackend) statement methods that backends bind alike, written
//! once as macros expanded inside each backend's `impl SqlBackend`. The SQL stays each
//! backend's own: only the binding and the reading of the answer are shared.

/// `owner`, `release` and `abandon`, whose statements bind (key hash[, fence, operation id[,
/// clock override]]) in that order on every backend. `$conn` is the backend's connection,
/// `$state` the integer type its `state` column decodes to; each statement is given as a
/// function of `causal` (see [`SqlCore::causal`](super::SqlCore::causal)) to its text.
macro_rules! lease_statements {
    (
        conn: $conn:ty,
        state: $state:ty,
        owner: $owner:expr,
        release: $release:expr,
        abandon: $abandon:expr $(,)?
    ) => {
        async fn owner<'e>(
            conn: &'e mut $conn,
            key: &'e $crate::key::ScopedKey,
            causal: bool,
        ) -> Result<Option<(i64, i64, String)>, sqlx::Error> {
            use sqlx::Row as _;
            let row = sqlx::query(($owner)(causal))
                .bind(&key.hash()[..])
                .fetch_optional(conn)
                .await?;
            row.map(|r| {
                Ok((
                    i64::from(r.try_get::<$state, _>(0)?),
                    r.try_get(1)?,
                    r.try_get(2)?,
                ))
            })
            .transpose()
        }

        async fn release<'e>(
            conn: &'e mut $conn,
            lease: &'e $crate::store::interface::Lease,
            fence: i64,
            causal: bool,
        ) -> Result<u64, sqlx::Error> {
            let done = sqlx::query(($release)(causal))
                .bind(&lease.key.hash()[..])
                .bind(fence)
                .bind(&lease.operation_id)
                .execute(conn)
                .await?;
            Ok(done.rows_affected())
        }

        async fn abandon<'e>(
            conn: &'e mut $conn,
            lease: &'e $crate::store::interface::Lease,
            fence: i64,
            now: Option<i64>,
            causal: bool,
        ) -> Result<u64, sqlx::Error> {
            let done = sqlx::query(($abandon)(causal))
                .bind(&lease.key.hash()[..])
                .bind(fence)
                .bind(&lease.operation_id)
                .bind(now)
                .execute(conn)
                .await?;
            Ok(done.rows_affected())
        }
    };
}
pub(crate) use lease_statements;

/// `select`, `complete`, `extend` and `extended` of the backends whose parameters are numbered
/// (`$n` on PostgreSQL, `?n` on SQLite): their statements take each value once, in the same
/// order, and `extend` returns `lease_until, expire_at`. MySQL binds positionally, once per
/// occurrence, and writes its own. `$int` is the integer type `state` and `resp_status` are
/// bound as; `$read` reads a row of `record_columns!(), now`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! numbered_statements {
    (
        conn: $conn:ty,
        int: $int:ty,
        read: $read:expr,
        select: $select:expr,
        complete: $complete:expr,
        complete_expiring: $complete_expiring:expr,
        extend: $extend:expr $(,)?
    ) => {
        async fn select<'e>(
            conn: &'e mut $conn,
            key: &'e $crate::key::ScopedKey,
            now: Option<i64>,
            // One server: every read is causal.
            _causal: bool,
        ) -> Result<Option<$crate::store::sql_store::RawRecord>, sqlx::Error> {
            let row = sqlx::query($select)
                .bind(&key.hash()[..])
                .bind(now)
                .fetch_optional(conn)
                .await?;
            row.map(|r| $read(&r)).transpose()
        }

        async fn complete<'e>(
            conn: &'e mut $conn,
            lease: &'e $crate::store::interface::Lease,
            fence: i64,
            completion: &'e $crate::store::interface::Completion,
            headers: &'e [u8],
            now: Option<i64>,
            // One server: every statement is causal.
            _causal: bool,
        ) -> Result<u64, sqlx::Error> {
            let state = $crate::store::interface::RecordState::from(completion.outcome).code();
            // The claim's expiry kept (the engine's completions) or a new one: each its own
            // statement, so that the common one binds and computes no expiry.
            let (sql, expire_at) = match completion.expire_at {
                None => ($complete, None),
                Some(at) => ($complete_expiring, Some(at.as_millis())),
            };
            let mut query = sqlx::query(sql)
                .bind(&lease.key.hash()[..])
                .bind(fence)
                .bind(<$int>::from(state))
                .bind(completion.status as $int)
                .bind(headers)
                .bind(&completion.body[..])
                .bind(completion.biz_no.as_deref());
            if let Some(at) = expire_at {
                query = query.bind(at);
            }
            let done = query
                .bind(now)
                .bind(&lease.operation_id)
                .execute(conn)
                .await?;
            Ok(done.rows_affected())
        }

        async fn extend<'e>(
            conn: &'e mut $conn,
            lease: &'e $crate::store::interface::Lease,
            fence: i64,
            by_ms: i64,
            now: Option<i64>,
            _causal: bool,
        ) -> Result<Option<(i64, i64)>, sqlx::Error> {
            use sqlx::Row as _;
            let row = sqlx::query($extend)
                .bind(&lease.key.hash()[..])
                .bind(fence)
                .bind(&lease.operation_id)
                .bind(by_ms)
                .bind(now)
                .fetch_optional(conn)
                .await?;
            row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
        }

        fn extended(
            out: Option<(i64, i64)>,
            lease: &$crate::store::interface::Lease,
            _by: core::time::Duration,
        ) -> Result<$crate::store::interface::Lease, $crate::store::error::StoreError> {
            $crate::store::sql_store::ops::returned_lease(out, lease)
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use numbered_statements;
