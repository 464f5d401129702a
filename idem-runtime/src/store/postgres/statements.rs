//! The statements of [`PostgresStore`](super::PostgresStore).
//!
//! The rule: every statement computes "now" itself, from the database's clock
//! (`statement_timestamp()`) or the test clock bound in its place, and binds only parameters.

use crate::store::sql_store::record_columns;

/// The table of the records, in idem's own schema.
macro_rules! table {
    () => {
        "idem.idempotency_records"
    };
}

/// idem's migration history, its own table (never the application's `_sqlx_migrations`).
macro_rules! migrations_table {
    () => {
        "idem._sqlx_migrations"
    };
}
pub(super) use migrations_table;

/// The table of the records.
pub const TABLE: &str = table!();

/// idem's migration history table.
pub const MIGRATIONS_TABLE: &str = migrations_table!();

/// "Now" in milliseconds since the Unix epoch by the database's clock: `statement_timestamp()`,
/// the start of the current statement, one value wherever the statement reads it (unlike
/// `clock_timestamp()`), and the statement's own time inside a caller's transaction too (unlike
/// `now()`, the transaction's start). Parameter `$n` is the store's clock override, `NULL`
/// unless `with_clock` set one (tests).
macro_rules! now {
    ($n:literal) => {
        concat!("COALESCE($", $n, "::bigint, ", db_now!(), ")")
    };
}

macro_rules! db_now {
    () => {
        "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint"
    };
}

/// The SQL expression the store reads the time from: milliseconds since the Unix epoch by the
/// database's clock (`statement_timestamp()`), for tools that query the table beside the store.
pub const NOW_MS_SQL: &str = db_now!();

/// The claim (S13, S14): insert, or return the existing row from the statement's snapshot.
/// `$5` is the clock override, `$6` the lease, `$7` the TTL and `$8` the remember window in ms
/// (0 without one: `replay_until` stays `NULL`); every column that holds a time is computed
/// here, from the database's clock, read once (`t`). A fresh claim returns what its lease needs
/// (`fence`, `lease_until`, `expire_at`; the other columns `NULL`); an existing row all of
/// [`record_columns!`]. The last column is that "now".
pub(super) const CLAIM_SQL: &str = concat!(
    "WITH t AS (SELECT ",
    now!("5"),
    " AS now), \
     claimed AS ( \
       INSERT INTO ",
    table!(),
    " \
         (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at, replay_until) \
       SELECT $1, $2, $3, 0, $4, 1, 1, now, now + $6::bigint, \
         now + GREATEST($6::bigint, $7::bigint, $8::bigint), now, now, \
         CASE WHEN $8::bigint > 0 THEN now + GREATEST($6::bigint, $7::bigint) END FROM t \
       ON CONFLICT (key_hash) DO NOTHING \
       RETURNING fence, lease_until, expire_at, locked_at \
     ) \
     SELECT TRUE AS claimed, NULL::text, NULL::char(64), NULL::smallint, NULL::varchar(64), \
       fence, NULL::bigint, NULL::smallint, NULL::bytea, NULL::bytea, NULL::text, NULL::bigint, \
       lease_until, expire_at, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, locked_at \
     FROM claimed \
     UNION ALL \
     SELECT FALSE AS claimed, ",
    record_columns!(),
    ", t.now FROM ",
    table!(),
    ", t \
      WHERE key_hash = $1 AND NOT EXISTS (SELECT 1 FROM claimed)"
);

/// Replacing an expired record (S21: a new operation id) or taking over an expired lease of the
/// same request (S23: same operation id), with the parameters of [`CLAIM_SQL`]. The condition
/// is re-checked on the latest row version, so only one of concurrent takeovers returns a row.
/// `SET` sees the old row.
///
/// The operation id changes only when the record has expired by the database's clock: it is
/// logically absent (S21), so this is a new operation, and the old one's zombie (old id, lower
/// fence) stays fenced out. An ended lease of the same request keeps its id: the operation goes
/// on, and its effects may already exist under that id (S22, S23).
pub(super) const TAKEOVER_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " AS r SET \
       idem_key = $2, \
       request_hash = $3, \
       state = 0, \
       operation_id = CASE WHEN r.expire_at <= ",
    now!("5"),
    " THEN $4 ELSE r.operation_id END, \
       fence = r.fence + 1, \
       rev = r.rev + 1, \
       resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
       locked_at = ",
    now!("5"),
    ", \
       lease_until = ",
    now!("5"),
    " + $6::bigint, \
       expire_at = CASE WHEN r.expire_at <= ",
    now!("5"),
    " \
         THEN ",
    now!("5"),
    " + GREATEST($6::bigint, $7::bigint, $8::bigint) \
         ELSE GREATEST(r.expire_at, ",
    now!("5"),
    " + $6::bigint) END, \
       replay_until = CASE WHEN r.expire_at <= ",
    now!("5"),
    " THEN CASE WHEN $8::bigint > 0 THEN ",
    now!("5"),
    " + GREATEST($6::bigint, $7::bigint) END \
         WHEN r.replay_until IS NULL OR r.replay_until <= r.created_at THEN NULL \
         ELSE GREATEST(r.replay_until, ",
    now!("5"),
    " + $6::bigint) END, \
       created_at = CASE WHEN r.expire_at <= ",
    now!("5"),
    " THEN ",
    now!("5"),
    " ELSE r.created_at END, \
       updated_at = ",
    now!("5"),
    " \
     WHERE r.key_hash = $1 \
       AND (r.expire_at <= ",
    now!("5"),
    " \
            OR (r.state = 0 AND r.lease_until <= ",
    now!("5"),
    " AND r.request_hash = $3)) \
     RETURNING TRUE AS claimed, ",
    record_columns!(),
    ", ",
    now!("5")
);

/// The row of a key and the database's "now" (`$2`: the clock override).
pub(super) const SELECT_SQL: &str = concat!(
    "SELECT FALSE AS claimed, ",
    record_columns!(),
    ", ",
    now!("2"),
    " FROM ",
    table!(),
    " WHERE key_hash = $1"
);

/// Completion (S18): one short statement, only while the lease's fence and operation id are the
/// record's and it is processing (S23). No expiry condition: a result nobody superseded is
/// stored even when it comes after `expire_at`. The record keeps the expiry its claim set (the
/// engine's completions: [`COMPLETE_EXPIRING_SQL`] sets another), so `expire_at` and
/// `replay_until` are not written. (The single statement this replaced cleared a
/// `replay_until` at or before `created_at` when given no expiry; a processing record has none:
/// a claim writes it after `created_at`, a takeover clears a stale one.) `$8` is the clock
/// override, `$9` the operation id.
pub(super) const COMPLETE_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       state = $3, resp_status = $4, resp_headers = $5, resp_body = $6, biz_no = $7, \
       updated_at = ",
    now!("8"),
    ", completed_at = ",
    now!("8"),
    ", rev = rev + 1 \
     WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $9"
);

/// [`COMPLETE_SQL`] with a new expiry for the snapshot (`Completion::with_expire_at`): `$8` is
/// that absolute time, `$9` the clock override, `$10` the operation id. A remembered record
/// keeps the longer of its ends, and its replays end at the new time.
pub(super) const COMPLETE_EXPIRING_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       state = $3, resp_status = $4, resp_headers = $5, resp_body = $6, biz_no = $7, \
       expire_at = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN $8::bigint \
         ELSE GREATEST(expire_at, $8) END, \
       replay_until = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL ELSE GREATEST($8, created_at + 1) END, \
       updated_at = ",
    now!("9"),
    ", completed_at = ",
    now!("9"),
    ", \
       rev = rev + 1 \
     WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $10"
);

/// Who owns a record: read when a completion matched no row (see `completed_earlier`).
pub(super) const OWNER_SQL: &str = concat!(
    "SELECT state, fence, operation_id FROM ",
    table!(),
    " WHERE key_hash = $1"
);

pub(super) const RELEASE_SQL: &str = concat!(
    "DELETE FROM ",
    table!(),
    " \
    WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $3"
);

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`).
pub(super) const ABANDON_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       lease_until = LEAST(lease_until, ",
    now!("4"),
    "), updated_at = ",
    now!("4"),
    ", rev = rev + 1 \
     WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $3"
);

/// Renews a lease for `$4` ms from now; the record lives at least as long.
pub(super) const EXTEND_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       lease_until = ",
    now!("5"),
    " + $4::bigint, \
       expire_at = GREATEST(expire_at, ",
    now!("5"),
    " + $4::bigint), \
       replay_until = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL ELSE GREATEST(replay_until, ",
    now!("5"),
    " + $4::bigint) END, \
       updated_at = ",
    now!("5"),
    ", rev = rev + 1 \
     WHERE key_hash = $1 AND fence = $2 AND state = 0 AND operation_id = $3 \
     RETURNING lease_until, expire_at"
);

/// Purge along `idx_idem_expire_at`, bounded by `LIMIT`, in `(expire_at, key_hash)` order,
/// skipping rows another transaction holds (S21). The batch is a materialized CTE: as
/// `key_hash IN (SELECT .. LIMIT ..)` the planner may re-run the subquery and delete more than a
/// batch. The outer condition is re-checked on the latest row version, so a record replaced by
/// a concurrent claim is never deleted: only records logically absent (expired by the
/// database's clock) are.
pub(super) const PURGE_SQL: &str = concat!(
    "WITH batch AS MATERIALIZED ( \
       SELECT key_hash FROM ",
    table!(),
    " WHERE expire_at <= ",
    now!("1"),
    " \
       ORDER BY expire_at, key_hash LIMIT $2 FOR UPDATE SKIP LOCKED) \
     DELETE FROM ",
    table!(),
    " r USING batch \
     WHERE r.key_hash = batch.key_hash AND r.expire_at <= ",
    now!("1")
);

/// The purge's first phase for remembered records: frees the response of at most `$2` records
/// whose `replay_until` has passed and whose `expire_at` has not, along `idx_idem_replay_until`,
/// oldest first, skipping rows another transaction holds. `replay_until` turns negative as the
/// response goes (its absolute value still says when it expired), which takes the row out of
/// the index's range `(0, now]`: the next batch does not scan the freed rows again.
pub(super) const PURGE_RESPONSES_SQL: &str = concat!(
    "WITH batch AS MATERIALIZED ( \
       SELECT key_hash FROM ",
    table!(),
    " WHERE replay_until > 0 AND replay_until > created_at AND replay_until <= ",
    now!("1"),
    " AND state IN (1, 2) AND expire_at > ",
    now!("1"),
    " \
       ORDER BY replay_until, key_hash LIMIT $2 FOR UPDATE SKIP LOCKED) \
     UPDATE ",
    table!(),
    " r SET resp_headers = NULL, resp_body = NULL, replay_until = -r.replay_until, rev = r.rev + 1 \
     FROM batch \
     WHERE r.key_hash = batch.key_hash AND r.state IN (1, 2) \
       AND r.replay_until > 0 AND r.replay_until > r.created_at AND r.replay_until <= ",
    now!("1"),
    " AND r.expire_at > ",
    now!("1")
);

// The operator statements: what the `idem` CLI sends, and what other tools may send beside the
// store, to read a record, count records, end a lease, expire a record, rewrite a stored response
// or read the migration history. Bind parameters only; "now" is the store's own expression; every
// time is milliseconds since the Unix epoch, every integer a `BIGINT`.

/// One record, by key hash (`$1`): `idem_key`, `state`, `fence`, `lease_until`, `expire_at`,
/// `request_hash`, `resp_status`, `biz_no`, `operation_id`, `resp_body`, `created_at`,
/// `updated_at`, the database's "now", `resp_headers`, `replay_until` (`NULL` unless the record is
/// remembered past its TTL, negative once its response was freed), in that order.
pub const INSPECT: &str = concat!(
    "SELECT idem_key, state::bigint, fence, lease_until, expire_at, request_hash::text, \
     resp_status::bigint, biz_no, operation_id::text, resp_body, created_at, updated_at, ",
    db_now!(),
    ", resp_headers, replay_until FROM ",
    table!(),
    " WHERE key_hash = $1"
);

/// The number of remembered records (`remember`): stored, past their TTL (`replay_until`,
/// negative once the purge freed the response) and within their remember window.
pub const COUNT_REMEMBERED: &str = concat!(
    "SELECT COUNT(*) FROM ",
    table!(),
    ", (SELECT ",
    db_now!(),
    " AS n) AS t WHERE replay_until IS NOT NULL AND state IN (1, 2) \
       AND abs(replay_until) > created_at AND abs(replay_until) <= n AND expire_at > n"
);

/// The number of expired records: those a purge would delete now.
pub const COUNT_EXPIRED: &str = concat!(
    "SELECT COUNT(*) FROM ",
    table!(),
    " WHERE expire_at <= ",
    db_now!()
);

/// The oldest live processing record: its key hash in hex, when its lease was taken and the
/// database's "now"; no row when there is none.
pub const OLDEST_PROCESSING: &str = concat!(
    "SELECT encode(key_hash, 'hex'), locked_at, ",
    db_now!(),
    " FROM ",
    table!(),
    " WHERE state = 0 AND expire_at > ",
    db_now!(),
    " ORDER BY locked_at LIMIT 1"
);

/// The number of live records expiring within the next hour, and within the next day.
pub const EXPIRING: &str = concat!(
    "SELECT COUNT(*) FILTER (WHERE expire_at <= n + 3600000), COUNT(*) FROM ",
    table!(),
    ", (SELECT ",
    db_now!(),
    " AS n) AS t WHERE expire_at > n AND expire_at <= n + 86400000"
);

/// Ends the lease of a processing record now, as `Store::abandon` does: the record and its
/// operation id stay, and the next request with the same body takes it over under that id. Only
/// while the record (key hash `$1`) is still operation `$2` at fence `$3`: a record purged and
/// claimed afresh starts again at fence 1. Changes one row, or none.
pub const END_LEASE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET lease_until = LEAST(lease_until, ",
    db_now!(),
    "), updated_at = ",
    db_now!(),
    ", rev = rev + 1 WHERE key_hash = $1 AND operation_id = $2 AND fence = $3 AND state = 0"
);

/// Expires a record now, whatever its state: the key is free, and the next claim replaces the
/// record under a new operation id (fence + 1, which fences out a handler still running). The row
/// stays until a purge. With the guard and binds of [`END_LEASE`]. Changes one row, or none.
pub const EXPIRE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET expire_at = LEAST(expire_at, ",
    db_now!(),
    "), updated_at = ",
    db_now!(),
    ", rev = rev + 1 WHERE key_hash = $1 AND operation_id = $2 AND fence = $3"
);

/// The number of live stored records (completed, or failed and stored).
pub const COUNT_STORED: &str = concat!(
    "SELECT COUNT(*) FROM ",
    table!(),
    " WHERE state IN (1, 2) AND expire_at > ",
    db_now!()
);

/// The columns of a stored record as [`STORED_PAGE`] and [`STORED_ONE`] read it.
macro_rules! stored_columns {
    () => {
        "key_hash, idem_key, operation_id, request_hash::text AS request_hash, \
         resp_status::bigint AS resp_status, state::bigint AS state, rev, resp_headers, \
         resp_body, biz_no"
    };
}

/// Up to `$2` live stored records with a key hash above `$1`, in key-hash order: `key_hash`,
/// `idem_key`, `operation_id`, `request_hash`, `resp_status`, `state`, `rev`, `resp_headers`,
/// `resp_body`, `biz_no`, by those names.
pub const STORED_PAGE: &str = concat!(
    "SELECT ",
    stored_columns!(),
    " FROM ",
    table!(),
    " WHERE key_hash > $1 AND state IN (1, 2) AND expire_at > ",
    db_now!(),
    " ORDER BY key_hash LIMIT $2"
);

/// The live stored record of key hash `$1`, if it still is one, with the columns of
/// [`STORED_PAGE`].
pub const STORED_ONE: &str = concat!(
    "SELECT ",
    stored_columns!(),
    " FROM ",
    table!(),
    " WHERE key_hash = $1 AND state IN (1, 2) AND expire_at > ",
    db_now!()
);

/// Replaces the response of a stored record (`$1` `idem_key`, `$2` `resp_headers`, `$3`
/// `resp_body`, `$4` `biz_no`) while it (key hash `$5`) is still operation `$6` at row version
/// `$7`: never over what the store wrote since. Changes one row, or none. A
/// remembered record whose response the purge freed keeps its response columns empty: only
/// its key and business number (the receipt) change.
pub const REWRITE_RESPONSE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET idem_key = $1, resp_headers = CASE WHEN resp_headers IS NULL THEN NULL ELSE $2 END, resp_body = CASE WHEN resp_body IS NULL THEN NULL ELSE $3 END, biz_no = $4, updated_at = ",
    db_now!(),
    ", rev = rev + 1 WHERE key_hash = $5 AND operation_id = $6 AND rev = $7 AND state IN (1, 2)"
);

/// The number of records in each state, expired ones included (they hold rows until purged):
/// `(state, count)` rows in state order.
pub const COUNT_BY_STATE: &str = concat!(
    "SELECT state::bigint, COUNT(*) FROM ",
    table!(),
    " GROUP BY state ORDER BY state"
);

/// The size of the table and of its indexes, in bytes.
pub const SIZE: &str = concat!(
    "SELECT pg_table_size('",
    table!(),
    "'), pg_indexes_size('",
    table!(),
    "')"
);

/// idem's migration history: `version` and `description` of each migration applied, in version
/// order (no table before the first migration).
pub const MIGRATIONS: &str = concat!(
    "SELECT version, description FROM ",
    migrations_table!(),
    " ORDER BY version"
);
