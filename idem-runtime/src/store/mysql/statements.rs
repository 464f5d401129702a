//! The statements of [`MySqlStore`](super::MySqlStore).

use crate::store::sql_store::record_columns;

/// "Now" in milliseconds since the Unix epoch by the database's clock: `UTC_TIMESTAMP(6)` is
/// the statement's start, one value wherever the statement reads it, and the difference of two
/// UTC `DATETIME`s does not depend on the session's time zone (unlike `UNIX_TIMESTAMP(NOW())`).
/// Its `?` is the store's clock override, `NULL` unless `with_clock` set one (tests); MySQL
/// parameters are positional, so each occurrence binds it again.
macro_rules! now {
    () => {
        concat!("COALESCE(?, ", db_now!(), ")")
    };
}

macro_rules! db_now {
    () => {
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000"
    };
}

/// The SQL expression the store reads the time from: milliseconds since the Unix epoch by the
/// database's clock (`UTC_TIMESTAMP(6)`), for tools that query the table beside the store.
pub const NOW_MS_SQL: &str = db_now!();

/// The text of [`INSERT_SQL`], which [`CLAIM_RETURNING_SQL`] begins with too.
macro_rules! insert_claim {
    () => {
        concat!(
            "INSERT INTO idem_idempotency_records \
               (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at) \
             VALUES (?, ?, ?, 0, ?, 1, 1, ",
            now!(),
            ", ",
            now!(),
            " + ?, ",
            now!(),
            " + GREATEST(?, ?), ",
            now!(),
            ", LAST_INSERT_ID(",
            now!(),
            "))"
        )
    };
}

/// The claim (S13, S15): a plain insert; the unique index on `key_hash` decides. Every time is
/// computed from the database's clock, and `updated_at = LAST_INSERT_ID(now)` hands that "now"
/// back in the OK packet (`last_insert_id`): MySQL has no `RETURNING`, and the lease's deadlines
/// follow from it without another round trip. Binds: key hash, readable key, request hash,
/// operation id, then (override, override, lease ms, override, lease ms, TTL ms, override,
/// override).
pub(super) const INSERT_SQL: &str = insert_claim!();

/// The claim in one statement on MariaDB 10.5+: the same `INSERT`, which on a duplicate in
/// `uk_idem_key` changes nothing (`rev = rev`) and returns the row there instead (`docs/storage.md`,
/// "MariaDB / MySQL"). Binds: those of [`INSERT_SQL`], then the
/// override of the returned "now".
pub(super) const CLAIM_RETURNING_SQL: &str = concat!(
    insert_claim!(),
    " ON DUPLICATE KEY UPDATE rev = rev RETURNING ",
    record_columns!(),
    ", ",
    now!(),
    ", key_hash"
);

/// The column of [`CLAIM_RETURNING_SQL`] holding the returned row's key hash: after the record's
/// columns and "now".
pub(super) const CLAIM_RETURNING_KEY_HASH: usize = 17;

/// Replacing an expired record (S21, a new operation): a compare-and-swap on the row version
/// read just before, re-checking expiry by the database's clock. Binds: readable key, request
/// hash, operation id, override, override, lease ms, override, lease-or-TTL ms, override,
/// override, key hash, rev, override.
pub(super) const REPLACE_SQL: &str = concat!(
    "UPDATE idem_idempotency_records SET \
       idem_key = ?, request_hash = ?, state = 0, operation_id = ?, fence = fence + 1, rev = rev + 1, \
       resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
       locked_at = ",
    now!(),
    ", lease_until = ",
    now!(),
    " + ?, expire_at = ",
    now!(),
    " + ?, \
       created_at = ",
    now!(),
    ", updated_at = LAST_INSERT_ID(",
    now!(),
    ") \
     WHERE key_hash = ? AND rev = ? AND expire_at <= ",
    now!()
);

/// Taking over an expired lease of the same request (S23, the same operation goes on): a
/// compare-and-swap on the row version, re-checking by the database's clock that the lease has
/// ended and the record has not expired. Every expression reads the row's old values only, so
/// the statement means the same whether MariaDB assigns left to right or simultaneously
/// (`SIMULTANEOUS_ASSIGNMENT`). Binds: readable key, override, override, lease ms, override, lease ms,
/// override, key hash, rev, override, override, request hash.
pub(super) const TAKEOVER_SQL: &str = concat!(
    "UPDATE idem_idempotency_records SET \
       idem_key = ?, fence = fence + 1, rev = rev + 1, locked_at = ",
    now!(),
    ", lease_until = ",
    now!(),
    " + ?, \
       expire_at = GREATEST(expire_at, ",
    now!(),
    " + ?), updated_at = LAST_INSERT_ID(",
    now!(),
    ") \
     WHERE key_hash = ? AND rev = ? AND state = 0 AND expire_at > ",
    now!(),
    " \
       AND lease_until <= ",
    now!(),
    " AND request_hash = ?"
);

/// The row of a key and the database's "now". Binds: override, key hash.
/// A plain lookup through `uk_idem_key`: MariaDB materializes a derived table that puts the key
/// first (as the other backends bind it) as a temporary table on every execution.
pub(super) const SELECT_SQL: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", ",
    now!(),
    " AS db_now FROM idem_idempotency_records WHERE key_hash = ?"
);

/// Completion (S18): one short statement, only while the lease's fence and operation id are the
/// record's and it is processing (S23). No expiry condition: a result nobody superseded is
/// stored even when it comes after `expire_at`.
pub(super) const COMPLETE_SQL: &str = concat!(
    "UPDATE idem_idempotency_records SET \
       state = ?, resp_status = ?, resp_headers = ?, resp_body = ?, biz_no = ?, \
       expire_at = COALESCE(?, expire_at), updated_at = ",
    now!(),
    ", completed_at = ",
    now!(),
    ", \
       rev = rev + 1 \
     WHERE key_hash = ? AND fence = ? AND state = 0 AND operation_id = ?"
);

/// Who owns a record: read when a completion matched no row (see `completed_earlier`).
pub(super) const OWNER_SQL: &str =
    "SELECT state, fence, operation_id FROM idem_idempotency_records WHERE key_hash = ?";

pub(super) const RELEASE_SQL: &str = "DELETE FROM idem_idempotency_records \
    WHERE key_hash = ? AND fence = ? AND state = 0 AND operation_id = ?";

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`). The
/// parameters come in the order the other stores bind them (key hash, fence, operation id,
/// override), named once by a derived table; each assignment reads only its own column's old
/// value, so the order in which a multiple-table `UPDATE` assigns does not matter.
pub(super) const ABANDON_SQL: &str = concat!(
    "UPDATE idem_idempotency_records AS r \
     JOIN (SELECT ? AS k, ? AS f, ? AS op, ",
    now!(),
    " AS now) AS p ON r.key_hash = p.k \
     SET r.lease_until = LEAST(r.lease_until, p.now), r.updated_at = p.now, r.rev = r.rev + 1 \
     WHERE r.fence = p.f AND r.state = 0 AND r.operation_id = p.op"
);

/// Renews a lease for `by` ms from now; the record lives at least as long; the statement's
/// "now" comes back as `last_insert_id`. Binds: override, by, override, by, override, key hash,
/// fence, operation id.
pub(super) const EXTEND_SQL: &str = concat!(
    "UPDATE idem_idempotency_records SET \
       lease_until = ",
    now!(),
    " + ?, expire_at = GREATEST(expire_at, ",
    now!(),
    " + ?), \
       updated_at = LAST_INSERT_ID(",
    now!(),
    "), rev = rev + 1 \
     WHERE key_hash = ? AND fence = ? AND state = 0 AND operation_id = ?"
);

/// The purge's first statement, in a short transaction of its own: lock up to `?` expired
/// records along `idx_idem_expire_at`, in its order (`EXPLAIN`: a range scan, no sort),
/// skipping those another transaction holds. InnoDB secondary indexes end with the primary key,
/// so that order is `(expire_at, claim_id)`; the statement names `expire_at` only, which reads
/// the index in the same order whatever the primary key (`docs/storage.md`, "The record"), and
/// sweepers that skip each other's locks never wait for one another. Binds: override, batch.
pub(super) const PURGE_SELECT_SQL: &str = concat!(
    "SELECT key_hash FROM idem_idempotency_records WHERE expire_at <= ",
    now!(),
    " ORDER BY expire_at LIMIT ? FOR UPDATE SKIP LOCKED"
);

/// The purge's `DELETE` of the keys its `SELECT` locked, up to the `IN (` list, which the
/// caller completes with one `?` per key and `)`. Binds: override, the keys.
pub(super) const PURGE_DELETE_SQL: &str = concat!(
    "DELETE FROM idem_idempotency_records WHERE expire_at <= ",
    now!(),
    " AND key_hash IN ("
);
