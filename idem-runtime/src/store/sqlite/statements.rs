//! The statements of [`SqliteStore`](super::SqliteStore).

use crate::store::sql_store::record_columns;

/// The table of the records.
macro_rules! table {
    () => {
        "idem_idempotency_records"
    };
}

/// idem's migration history, its own table (never the application's `_sqlx_migrations`).
macro_rules! migrations_table {
    () => {
        "idem_sqlx_migrations"
    };
}
pub(super) use migrations_table;

/// The table of the records.
pub const TABLE: &str = table!();

/// idem's migration history table.
pub const MIGRATIONS_TABLE: &str = migrations_table!();

/// "Now" in milliseconds since the Unix epoch by SQLite's clock (the operating system's, read
/// by the library: with one file on one host, every process sees the same clock). SQLite keeps
/// `'now'` fixed for one `sqlite3_step()`, and every statement here does its work in its first
/// step, so the value is the same wherever a statement reads it; `julianday` counts whole
/// milliseconds, rounded back exactly. Parameter `?n` is the store's clock override, `NULL`
/// unless `with_clock` set one (tests).
macro_rules! now {
    ($n:literal) => {
        concat!("COALESCE(?", $n, ", ", db_now!(), ")")
    };
}

macro_rules! db_now {
    () => {
        "CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"
    };
}

/// The SQL expression the store reads the time from: milliseconds since the Unix epoch by
/// SQLite's clock, for tools that query the table beside the store.
pub const NOW_MS_SQL: &str = db_now!();

/// The text of [`CLAIM_SQL`], which [`CLAIM_AND_READ_SQL`] begins with too.
macro_rules! claim_upsert {
    () => {
        concat!(
            "INSERT INTO ", table!(), " \
               (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at, replay_until) \
             VALUES (?1, ?2, ?3, 0, ?4, 1, 1, ",
            now!("5"),
            ", ",
            now!("5"),
            " + ?6, ",
            now!("5"),
            " + max(?6, ?7, ?8), ",
            now!("5"),
            ", ",
            now!("5"),
            ", CASE WHEN ?8 > 0 THEN ",
            now!("5"),
            " + max(?6, ?7) END) \
             ON CONFLICT (key_hash) DO UPDATE SET \
               idem_key = excluded.idem_key, \
               request_hash = excluded.request_hash, \
               state = 0, \
               operation_id = CASE WHEN expire_at <= ",
            now!("5"),
            " THEN excluded.operation_id ELSE operation_id END, \
               fence = fence + 1, \
               rev = rev + 1, \
               resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
               locked_at = ",
            now!("5"),
            ", \
               lease_until = ",
            now!("5"),
            " + ?6, \
               expire_at = CASE WHEN expire_at <= ",
            now!("5"),
            " THEN ",
            now!("5"),
            " + max(?6, ?7, ?8) \
                 ELSE max(expire_at, ",
            now!("5"),
            " + ?6) END, \
               replay_until = CASE WHEN expire_at <= ",
            now!("5"),
            " THEN CASE WHEN ?8 > 0 THEN ",
            now!("5"),
            " + max(?6, ?7) END \
                 WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL \
                 ELSE max(replay_until, ",
            now!("5"),
            " + ?6) END, \
               created_at = CASE WHEN expire_at <= ",
            now!("5"),
            " THEN ",
            now!("5"),
            " ELSE created_at END, \
               updated_at = ",
            now!("5"),
            " \
             WHERE expire_at <= ",
            now!("5"),
            " \
                OR (state = 0 AND lease_until <= ",
            now!("5"),
            " AND request_hash = excluded.request_hash) \
             RETURNING fence, operation_id, lease_until, expire_at"
        )
    };
}

/// The claim (S13, S14): one atomic upsert that inserts a fresh record, or replaces an expired
/// one (S21), or takes over an expired lease of the same request (S23), and returns the row only
/// when it claimed. `?5` is the clock override, `?6` the lease, `?7` the TTL and `?8` the
/// remember window in ms (0 without one: `replay_until` stays `NULL`).
/// Unqualified columns in `DO UPDATE` are the existing row's. The operation id changes only for
/// a record expired by the database's clock (logically absent, S21: a new operation, whose
/// predecessor's zombie stays fenced out); an ended lease of the same request keeps it (S23).
pub(super) const CLAIM_SQL: &str = claim_upsert!();

/// [`CLAIM_SQL`], then, in the same call to the connection's thread, the row of the key when
/// the upsert changed nothing (`changes() = 0`: a completed record to replay, or one in
/// progress): a replay costs one call instead of two. The upsert's row has 4 columns, the
/// read's those of [`SELECT_SQL`]: the caller tells them apart by their number
/// ([`CLAIMED_COLUMNS`]).
pub(super) const CLAIM_AND_READ_SQL: &str = concat!(
    claim_upsert!(),
    "; SELECT ",
    record_columns!(),
    ", ",
    now!("5"),
    " FROM ",
    table!(),
    " WHERE key_hash = ?1 AND changes() = 0"
);

/// Completion (S18): one short statement, only while the lease's fence and operation id are the
/// record's and it is processing (S23). No expiry condition: a result nobody superseded is
/// stored even when it comes after `expire_at`. The record keeps the expiry its claim set (as
/// on PostgreSQL: `expire_at` and `replay_until` are not written). `?8` is the clock override,
/// `?9` the operation id.
pub(super) const COMPLETE_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       state = ?3, resp_status = ?4, resp_headers = ?5, resp_body = ?6, biz_no = ?7, \
       updated_at = ",
    now!("8"),
    ", completed_at = ",
    now!("8"),
    ", rev = rev + 1 \
     WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?9"
);

/// [`COMPLETE_SQL`] with a new expiry for the snapshot: `?8` is that absolute time, `?9` the
/// clock override, `?10` the operation id.
pub(super) const COMPLETE_EXPIRING_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       state = ?3, resp_status = ?4, resp_headers = ?5, resp_body = ?6, biz_no = ?7, \
       expire_at = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN ?8 \
         ELSE max(expire_at, ?8) END, \
       replay_until = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL ELSE max(?8, created_at + 1) END, \
       updated_at = ",
    now!("9"),
    ", completed_at = ",
    now!("9"),
    ", \
       rev = rev + 1 \
     WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?10"
);

/// Who owns a record: read when a completion matched no row (see `completed_earlier`).
pub(super) const OWNER_SQL: &str = concat!(
    "SELECT state, fence, operation_id FROM ",
    table!(),
    " WHERE key_hash = ?1"
);

pub(super) const RELEASE_SQL: &str = concat!(
    "DELETE FROM ",
    table!(),
    " \
    WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?3"
);

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`).
pub(super) const ABANDON_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       lease_until = min(lease_until, ",
    now!("4"),
    "), updated_at = ",
    now!("4"),
    ", rev = rev + 1 \
     WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?3"
);

/// Renews a lease for `?4` ms from now; the record lives at least as long.
pub(super) const EXTEND_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       lease_until = ",
    now!("5"),
    " + ?4, \
       expire_at = max(expire_at, ",
    now!("5"),
    " + ?4), \
       replay_until = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL ELSE max(replay_until, ",
    now!("5"),
    " + ?4) END, \
       updated_at = ",
    now!("5"),
    ", rev = rev + 1 \
     WHERE key_hash = ?1 AND fence = ?2 AND state = 0 AND operation_id = ?3 \
     RETURNING lease_until, expire_at"
);

/// Purge along `idx_idem_expire_at`, bounded by `LIMIT`, in `(expire_at, key_hash)` order
/// (S21). One statement under SQLite's write lock: the records it deletes are exactly the ones
/// its subquery found expired by the database's clock (logically absent already).
pub(super) const PURGE_SQL: &str = concat!(
    "DELETE FROM ",
    table!(),
    " WHERE key_hash IN \
       (SELECT key_hash FROM ",
    table!(),
    " WHERE expire_at <= ",
    now!("1"),
    " \
        ORDER BY expire_at, key_hash LIMIT ?2)"
);

/// The purge's first phase for remembered records: frees the response of at most `?2` records
/// whose `replay_until` has passed and whose `expire_at` has not, along `idx_idem_replay_until`,
/// oldest first. `replay_until` turns negative as the response goes (its absolute value still
/// says when it expired), which takes the row out of the partial index: the next batch does not
/// scan the freed rows again.
pub(super) const PURGE_RESPONSES_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET resp_headers = NULL, resp_body = NULL, replay_until = -replay_until, rev = rev + 1 \
     WHERE key_hash IN \
       (SELECT key_hash FROM ",
    table!(),
    " WHERE replay_until > 0 AND replay_until > created_at AND replay_until <= ",
    now!("1"),
    " AND state IN (1, 2) AND expire_at > ",
    now!("1"),
    " \
        ORDER BY replay_until, key_hash LIMIT ?2)"
);

/// The row of a key and the database's "now" (`?2`: the clock override).
pub(super) const SELECT_SQL: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", ",
    now!("2"),
    " FROM ",
    table!(),
    " WHERE key_hash = ?1"
);

/// The columns of the row [`CLAIM_SQL`] returns when it claimed.
pub(super) const CLAIMED_COLUMNS: usize = 4;

// The operator statements: what the `idem` CLI sends, and what other tools may send beside the
// store, to read a record, count records, end a lease, expire a record, rewrite a stored response
// or read the migration history. Bind parameters only; "now" is the store's own expression; every
// time is milliseconds since the Unix epoch, every integer a `BIGINT`.

/// One record, by key hash (`?1`): `idem_key`, `state`, `fence`, `lease_until`, `expire_at`,
/// `request_hash`, `resp_status`, `biz_no`, `operation_id`, `resp_body`, `created_at`,
/// `updated_at`, the database's "now", `resp_headers`, `replay_until` (`NULL` unless the record is
/// remembered past its TTL, negative once its response was freed), in that order.
pub const INSPECT: &str = concat!(
    "SELECT idem_key, state, fence, lease_until, expire_at, request_hash, resp_status, biz_no, \
     operation_id, resp_body, created_at, updated_at, ",
    db_now!(),
    ", resp_headers, replay_until FROM ",
    table!(),
    " WHERE key_hash = ?1"
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
    "SELECT lower(hex(key_hash)), locked_at, ",
    db_now!(),
    " FROM ",
    table!(),
    " WHERE state = 0 AND expire_at > ",
    db_now!(),
    " ORDER BY locked_at LIMIT 1"
);

/// The number of live records expiring within the next hour, and within the next day.
pub const EXPIRING: &str = concat!(
    "SELECT COALESCE(SUM(expire_at <= n + 3600000), 0), COUNT(*) FROM ",
    table!(),
    ", (SELECT ",
    db_now!(),
    " AS n) AS t WHERE expire_at > n AND expire_at <= n + 86400000"
);

/// Ends the lease of a processing record now, as `Store::abandon` does: the record and its
/// operation id stay, and the next request with the same body takes it over under that id. Only
/// while the record (key hash `?1`) is still operation `?2` at fence `?3`: a record purged and
/// claimed afresh starts again at fence 1. Changes one row, or none.
pub const END_LEASE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET lease_until = min(lease_until, ",
    db_now!(),
    "), updated_at = ",
    db_now!(),
    ", rev = rev + 1 WHERE key_hash = ?1 AND operation_id = ?2 AND fence = ?3 AND state = 0"
);

/// Expires a record now, whatever its state: the key is free, and the next claim replaces the
/// record under a new operation id (fence + 1, which fences out a handler still running). The row
/// stays until a purge. With the guard and binds of [`END_LEASE`]. Changes one row, or none.
pub const EXPIRE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET expire_at = min(expire_at, ",
    db_now!(),
    "), updated_at = ",
    db_now!(),
    ", rev = rev + 1 WHERE key_hash = ?1 AND operation_id = ?2 AND fence = ?3"
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
        "key_hash, idem_key, operation_id, request_hash, resp_status, state, rev, resp_headers, \
         resp_body, biz_no"
    };
}

/// Up to `?2` live stored records with a key hash above `?1`, in key-hash order: `key_hash`,
/// `idem_key`, `operation_id`, `request_hash`, `resp_status`, `state`, `rev`, `resp_headers`,
/// `resp_body`, `biz_no`, by those names.
pub const STORED_PAGE: &str = concat!(
    "SELECT ",
    stored_columns!(),
    " FROM ",
    table!(),
    " WHERE key_hash > ?1 AND state IN (1, 2) AND expire_at > ",
    db_now!(),
    " ORDER BY key_hash LIMIT ?2"
);

/// The live stored record of key hash `?1`, if it still is one, with the columns of
/// [`STORED_PAGE`].
pub const STORED_ONE: &str = concat!(
    "SELECT ",
    stored_columns!(),
    " FROM ",
    table!(),
    " WHERE key_hash = ?1 AND state IN (1, 2) AND expire_at > ",
    db_now!()
);

/// Replaces the response of a stored record (`?1` `idem_key`, `?2` `resp_headers`, `?3`
/// `resp_body`, `?4` `biz_no`) while it (key hash `?5`) is still operation `?6` at row version
/// `?7`: never over what the store wrote since. Changes one row, or none. A
/// remembered record whose response the purge freed keeps its response columns empty: only
/// its key and business number (the receipt) change.
pub const REWRITE_RESPONSE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET idem_key = ?1, resp_headers = CASE WHEN resp_headers IS NULL THEN NULL ELSE ?2 END, resp_body = CASE WHEN resp_body IS NULL THEN NULL ELSE ?3 END, biz_no = ?4, updated_at = ",
    db_now!(),
    ", rev = rev + 1 WHERE key_hash = ?5 AND operation_id = ?6 AND rev = ?7 AND state IN (1, 2)"
);

/// The number of records in each state, expired ones included (they hold rows until purged):
/// `(state, count)` rows in state order.
pub const COUNT_BY_STATE: &str = concat!(
    "SELECT state, COUNT(*) FROM ",
    table!(),
    " GROUP BY state ORDER BY state"
);

/// The size of the whole database file in bytes, and `-1`: SQLite has no figure for the indexes.
pub const SIZE: &str =
    "SELECT page_count * page_size, -1 FROM pragma_page_count(), pragma_page_size()";

/// idem's migration history: `version` and `description` of each migration applied, in version
/// order (no table before the first migration).
pub const MIGRATIONS: &str = concat!(
    "SELECT version, description FROM ",
    migrations_table!(),
    " ORDER BY version"
);
