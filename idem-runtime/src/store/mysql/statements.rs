//! The statements of [`MySqlStore`](super::MySqlStore).

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

/// [`NOW_MS_SQL`] read as a signed `BIGINT`, whatever type the server gives the expression: the
/// "now" of the operator statements, which read it as every other integer.
macro_rules! now_signed {
    () => {
        concat!("CAST(", db_now!(), " AS SIGNED)")
    };
}

/// The text of [`INSERT_SQL`], which [`CLAIM_RETURNING_SQL`] begins with too.
macro_rules! insert_claim {
    () => {
        concat!(
            "INSERT INTO ", table!(), " \
               (key_hash, idem_key, request_hash, state, operation_id, fence, rev, locked_at, lease_until, expire_at, created_at, updated_at, replay_until) \
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
            "), CASE WHEN ? > 0 THEN ",
            now!(),
            " + GREATEST(?, ?) END)"
        )
    };
}

/// The claim (S13, S15): a plain insert; the unique index on `key_hash` decides. Every time is
/// computed from the database's clock, and `updated_at = LAST_INSERT_ID(now)` hands that "now"
/// back in the OK packet (`last_insert_id`): MySQL has no `RETURNING`, and the lease's deadlines
/// follow from it without another round trip. Binds: key hash, readable key, request hash,
/// operation id, then (override, override, lease ms, override, lease ms, record ms (the TTL,
/// or the remember window when longer), override, override, remember ms (0: none), override,
/// lease ms, TTL ms).
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
pub(super) const CLAIM_RETURNING_KEY_HASH: usize = 18;

/// Replacing an expired record (S21, a new operation): a compare-and-swap on the row version
/// read just before, re-checking expiry by the database's clock. Binds: readable key, request
/// hash, operation id, remember ms (0: none), override, lease-or-TTL ms, override, override,
/// lease ms, override, record ms (lease, TTL or remember window, the longest), override,
/// override, key hash, rev, override.
pub(super) const REPLACE_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       idem_key = ?, request_hash = ?, state = 0, operation_id = ?, fence = fence + 1, rev = rev + 1, \
       resp_status = NULL, resp_headers = NULL, resp_body = NULL, biz_no = NULL, completed_at = NULL, \
       replay_until = CASE WHEN ? > 0 THEN ",
    now!(),
    " + ? END, \
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
/// override, lease ms, override, key hash, rev, override, override, request hash.
pub(super) const TAKEOVER_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       idem_key = ?, fence = fence + 1, rev = rev + 1, locked_at = ",
    now!(),
    ", lease_until = ",
    now!(),
    " + ?, \
       expire_at = GREATEST(expire_at, ",
    now!(),
    " + ?), \
       replay_until = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL ELSE GREATEST(replay_until, ",
    now!(),
    " + ?) END, updated_at = LAST_INSERT_ID(",
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
    " AS db_now FROM ",
    table!(),
    " WHERE key_hash = ?"
);

/// The statements of a store on a node of a Galera cluster (`MySqlStore::with_galera`) that
/// read or change an existing record, in their causal form: each first waits until the node has
/// applied every write the cluster committed before it (`wsrep_sync_wait = 7`: reads, updates
/// and deletes, inserts), for that statement only, so that the pool's connections keep their
/// settings. A fresh claim's `INSERT` stays as it is: the cluster's certification settles a race
/// with a row the node has not applied yet.
pub(super) struct Causal {
    pub owner: &'static str,
    pub release: &'static str,
    pub abandon: &'static str,
    pub extend: &'static str,
    pub replace: &'static str,
    pub takeover: &'static str,
}

/// `sql` in its causal form, made once per process and kept for its life (`sqlx::query` takes
/// `&'static str`).
fn causal(sql: &str) -> &'static str {
    Box::leak(format!("SET STATEMENT wsrep_sync_wait = 7 FOR {sql}").into_boxed_str())
}

pub(super) static CAUSAL: std::sync::LazyLock<Causal> = std::sync::LazyLock::new(|| Causal {
    owner: causal(OWNER_SQL),
    release: causal(RELEASE_SQL),
    abandon: causal(ABANDON_SQL),
    extend: causal(EXTEND_SQL),
    replace: causal(REPLACE_SQL),
    takeover: causal(TAKEOVER_SQL),
});

/// The statements of a request's own path (the claim, the read of a record met, the completion)
/// as a store sends them: on a Galera node in their causal form (the claim's `INSERT` as it
/// is, see [`Causal`]), and without the clock override unless the store has one. MySQL binds
/// positionally, so the override's `COALESCE(?, ..)` costs a bound value wherever a statement
/// reads the time (six in the claim's `INSERT`), and it is `NULL` in production: measured in a
/// loop of prepared statements on one server, the claim's `INSERT` binding 16 values against 10.
/// The statements of the rarer paths (replacing, taking over, extending, purging) keep the
/// override. Pick one with [`request_path`]; bind the override with [`BindNow::bind_now`].
pub(super) struct RequestPath {
    pub insert: &'static str,
    pub claim_returning: &'static str,
    pub select: &'static str,
    pub complete: &'static str,
    pub complete_expiring: &'static str,
}

/// `sql` without the clock override: every `COALESCE(?, now)` becomes `(now)`.
fn unclocked(sql: &str) -> &'static str {
    let clocked = concat!("COALESCE(?, ", db_now!(), ")");
    let bare = concat!("(", db_now!(), ")");
    Box::leak(sql.replace(clocked, bare).into_boxed_str())
}

/// [`RequestPath`] by `[causal][clocked]`.
static PATHS: std::sync::LazyLock<[[RequestPath; 2]; 2]> = std::sync::LazyLock::new(|| {
    let path = |causal_form: bool, clocked: bool| {
        let form = |sql: &'static str| -> &'static str {
            let sql = if clocked { sql } else { unclocked(sql) };
            if causal_form { causal(sql) } else { sql }
        };
        RequestPath {
            // A fresh claim's `INSERT` is never causal (see `Causal`).
            insert: if clocked {
                INSERT_SQL
            } else {
                unclocked(INSERT_SQL)
            },
            claim_returning: form(CLAIM_RETURNING_SQL),
            select: form(SELECT_SQL),
            complete: form(COMPLETE_SQL),
            complete_expiring: form(COMPLETE_EXPIRING_SQL),
        }
    };
    [
        [path(false, false), path(false, true)],
        [path(true, false), path(true, true)],
    ]
});

/// The statements of a request's path for a store that is `causal` (a Galera node) and whose
/// clock override is `now` (`None`: the database's clock, without the override's parameters).
pub(super) fn request_path(causal: bool, now: Option<i64>) -> &'static RequestPath {
    &PATHS[usize::from(causal)][usize::from(now.is_some())]
}

/// Binds the clock override of a statement picked by [`request_path`] for the same `now`: a value when
/// the store has an override, nothing when its statements have none.
pub(super) trait BindNow {
    fn bind_now(self, now: Option<i64>) -> Self;
}

impl BindNow for sqlx::query::Query<'_, sqlx::mysql::MySql, sqlx::mysql::MySqlArguments> {
    fn bind_now(self, now: Option<i64>) -> Self {
        match now {
            Some(ms) => self.bind(ms),
            None => self,
        }
    }
}

/// `sql`, or on a Galera node (`causal`) its causal form, `pick`ed from [`CAUSAL`].
pub(super) fn statement(
    causal: bool,
    sql: &'static str,
    pick: fn(&Causal) -> &'static str,
) -> &'static str {
    if causal { pick(&CAUSAL) } else { sql }
}

/// Whether the server is a node of a MariaDB Galera cluster: `wsrep_on`, on MariaDB (Percona
/// XtraDB Cluster has `wsrep_on` too, but is MySQL, without `SET STATEMENT .. FOR`).
pub(super) const WSREP_ON_SQL: &str =
    "SELECT CAST(@@wsrep_on AS SIGNED) * (VERSION() LIKE '%MariaDB%')";

/// Completion (S18): one short statement, only while the lease's fence and operation id are the
/// record's and it is processing (S23). No expiry condition: a result nobody superseded is
/// stored even when it comes after `expire_at`. The record keeps the expiry its claim set (as
/// on PostgreSQL: `expire_at` and `replay_until` are not written). Binds: state, status,
/// headers, body, business number, override, override, key hash, fence, operation id.
pub(super) const COMPLETE_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       state = ?, resp_status = ?, resp_headers = ?, resp_body = ?, biz_no = ?, \
       updated_at = ",
    now!(),
    ", completed_at = ",
    now!(),
    ", rev = rev + 1 \
     WHERE key_hash = ? AND fence = ? AND state = 0 AND operation_id = ?"
);

/// [`COMPLETE_SQL`] with a new expiry for the snapshot, an absolute time bound three times
/// after the business number, before the overrides.
pub(super) const COMPLETE_EXPIRING_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       state = ?, resp_status = ?, resp_headers = ?, resp_body = ?, biz_no = ?, \
       expire_at = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN ? \
         ELSE GREATEST(expire_at, ?) END, \
       replay_until = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL ELSE GREATEST(?, created_at + 1) END, \
       updated_at = ",
    now!(),
    ", completed_at = ",
    now!(),
    ", \
       rev = rev + 1 \
     WHERE key_hash = ? AND fence = ? AND state = 0 AND operation_id = ?"
);

/// Who owns a record: read when a completion matched no row (see `completed_earlier`).
pub(super) const OWNER_SQL: &str = concat!(
    "SELECT state, fence, operation_id FROM ",
    table!(),
    " WHERE key_hash = ?"
);

pub(super) const RELEASE_SQL: &str = concat!(
    "DELETE FROM ",
    table!(),
    " \
    WHERE key_hash = ? AND fence = ? AND state = 0 AND operation_id = ?"
);

/// Ends the lease at once, keeping the record and its operation id (`Store::abandon`). The
/// parameters come in the order the other stores bind them (key hash, fence, operation id,
/// override), named once by a derived table; each assignment reads only its own column's old
/// value, so the order in which a multiple-table `UPDATE` assigns does not matter.
pub(super) const ABANDON_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " AS r \
     JOIN (SELECT ? AS k, ? AS f, ? AS op, ",
    now!(),
    " AS now) AS p ON r.key_hash = p.k \
     SET r.lease_until = LEAST(r.lease_until, p.now), r.updated_at = p.now, r.rev = r.rev + 1 \
     WHERE r.fence = p.f AND r.state = 0 AND r.operation_id = p.op"
);

/// Renews a lease for `by` ms from now; the record lives at least as long; the statement's
/// "now" comes back as `last_insert_id`. Binds: override, by, override, by, override, by,
/// override, key hash, fence, operation id.
pub(super) const EXTEND_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET \
       lease_until = ",
    now!(),
    " + ?, expire_at = GREATEST(expire_at, ",
    now!(),
    " + ?), \
       replay_until = CASE WHEN replay_until IS NULL OR replay_until <= created_at THEN NULL ELSE GREATEST(replay_until, ",
    now!(),
    " + ?) END, \
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
    "SELECT key_hash FROM ",
    table!(),
    " WHERE expire_at <= ",
    now!(),
    " ORDER BY expire_at LIMIT ? FOR UPDATE SKIP LOCKED"
);

/// The purge's `DELETE` of the keys its `SELECT` locked, up to the `IN (` list, which the
/// caller completes with one `?` per key and `)`. Binds: override, the keys.
pub(super) const PURGE_DELETE_SQL: &str = concat!(
    "DELETE FROM ",
    table!(),
    " WHERE expire_at <= ",
    now!(),
    " AND key_hash IN ("
);

/// The purge's first phase for remembered records: frees the response of at most `?` records
/// whose `replay_until` has passed and whose `expire_at` has not, along `idx_idem_replay_until`,
/// oldest first. `replay_until` turns negative as the response goes (its absolute value still
/// says when it expired), which takes the row out of the index range `(0, now]`: the next batch
/// does not scan the freed rows again. Binds: override, override, batch.
pub(super) const PURGE_RESPONSES_SQL: &str = concat!(
    "UPDATE ",
    table!(),
    " SET resp_headers = NULL, resp_body = NULL, replay_until = -replay_until, rev = rev + 1 \
     WHERE replay_until > 0 AND replay_until > created_at AND replay_until <= ",
    now!(),
    " AND state IN (1, 2) AND expire_at > ",
    now!(),
    " ORDER BY replay_until LIMIT ?"
);

// The operator statements: what the `idem` CLI sends, and what other tools may send beside the
// store, to read a record, count records, end a lease, expire a record, rewrite a stored response
// or read the migration history. Bind parameters only; "now" is the store's own expression; every
// time is milliseconds since the Unix epoch, every integer a `BIGINT`.

/// One record, by the key hash bound: `idem_key`, `state`, `fence`, `lease_until`, `expire_at`,
/// `request_hash`, `resp_status`, `biz_no`, `operation_id`, `resp_body`, `created_at`,
/// `updated_at`, the database's "now", `resp_headers`, `replay_until` (`NULL` unless the record is
/// remembered past its TTL, negative once its response was freed), in that order.
pub const INSPECT: &str = concat!(
    "SELECT idem_key, CAST(state AS SIGNED), fence, lease_until, expire_at, request_hash, \
     CAST(resp_status AS SIGNED), biz_no, operation_id, resp_body, created_at, updated_at, ",
    now_signed!(),
    ", resp_headers, replay_until FROM ",
    table!(),
    " WHERE key_hash = ?"
);

/// The number of remembered records (`remember`): stored, past their TTL (`replay_until`,
/// negative once the purge freed the response) and within their remember window.
pub const COUNT_REMEMBERED: &str = concat!(
    "SELECT COUNT(*) FROM ",
    table!(),
    ", (SELECT ",
    now_signed!(),
    " AS n) AS t WHERE replay_until IS NOT NULL AND state IN (1, 2) \
       AND ABS(replay_until) > created_at AND ABS(replay_until) <= n AND expire_at > n"
);

/// The number of expired records: those a purge would delete now.
pub const COUNT_EXPIRED: &str = concat!(
    "SELECT COUNT(*) FROM ",
    table!(),
    " WHERE expire_at <= ",
    now_signed!()
);

/// The oldest live processing record: its key hash in hex, when its lease was taken and the
/// database's "now"; no row when there is none.
pub const OLDEST_PROCESSING: &str = concat!(
    "SELECT LOWER(HEX(key_hash)), locked_at, ",
    now_signed!(),
    " FROM ",
    table!(),
    " WHERE state = 0 AND expire_at > ",
    now_signed!(),
    " ORDER BY locked_at LIMIT 1"
);

/// The number of live records expiring within the next hour, and within the next day.
pub const EXPIRING: &str = concat!(
    "SELECT CAST(COALESCE(SUM(expire_at <= n + 3600000), 0) AS SIGNED), COUNT(*) FROM ",
    table!(),
    ", (SELECT ",
    now_signed!(),
    " AS n) AS t WHERE expire_at > n AND expire_at <= n + 86400000"
);

/// Ends the lease of a processing record now, as `Store::abandon` does: the record and its
/// operation id stay, and the next request with the same body takes it over under that id. Only
/// while the record is still the operation at the fence given: a record purged and claimed afresh
/// starts again at fence 1. Binds: key hash, operation id, fence. Changes one row, or none.
pub const END_LEASE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET lease_until = LEAST(lease_until, ",
    now_signed!(),
    "), updated_at = ",
    now_signed!(),
    ", rev = rev + 1 WHERE key_hash = ? AND operation_id = ? AND fence = ? AND state = 0"
);

/// Expires a record now, whatever its state: the key is free, and the next claim replaces the
/// record under a new operation id (fence + 1, which fences out a handler still running). The row
/// stays until a purge. With the guard and binds of [`END_LEASE`]. Changes one row, or none.
pub const EXPIRE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET expire_at = LEAST(expire_at, ",
    now_signed!(),
    "), updated_at = ",
    now_signed!(),
    ", rev = rev + 1 WHERE key_hash = ? AND operation_id = ? AND fence = ?"
);

/// The number of live stored records (completed, or failed and stored).
pub const COUNT_STORED: &str = concat!(
    "SELECT COUNT(*) FROM ",
    table!(),
    " WHERE state IN (1, 2) AND expire_at > ",
    now_signed!()
);

/// The columns of a stored record as [`STORED_PAGE`] and [`STORED_ONE`] read it.
macro_rules! stored_columns {
    () => {
        "key_hash, idem_key, operation_id, request_hash, CAST(resp_status AS SIGNED) AS \
         resp_status, CAST(state AS SIGNED) AS state, rev, resp_headers, resp_body, biz_no"
    };
}

/// Live stored records with a key hash above the one bound, in key-hash order, up to the limit
/// bound: `key_hash`, `idem_key`, `operation_id`, `request_hash`, `resp_status`, `state`, `rev`,
/// `resp_headers`, `resp_body`, `biz_no`, by those names. Binds: key hash, limit.
pub const STORED_PAGE: &str = concat!(
    "SELECT ",
    stored_columns!(),
    " FROM ",
    table!(),
    " WHERE key_hash > ? AND state IN (1, 2) AND expire_at > ",
    now_signed!(),
    " ORDER BY key_hash LIMIT ?"
);

/// The live stored record of a key hash, if it still is one, with the columns of [`STORED_PAGE`].
/// Binds: key hash.
pub const STORED_ONE: &str = concat!(
    "SELECT ",
    stored_columns!(),
    " FROM ",
    table!(),
    " WHERE key_hash = ? AND state IN (1, 2) AND expire_at > ",
    now_signed!()
);

/// Replaces the response of a stored record while it is still the operation at the row version
/// given: never over what the store wrote since. Binds: `idem_key`, `resp_headers`, `resp_body`,
/// `biz_no`, then key hash, operation id, row version (`rev`). Changes one row, or none. A
/// remembered record whose response the purge freed keeps its response columns empty: only
/// its key and business number (the receipt) change.
pub const REWRITE_RESPONSE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET idem_key = ?, resp_headers = CASE WHEN resp_headers IS NULL THEN NULL ELSE ? END, resp_body = CASE WHEN resp_body IS NULL THEN NULL ELSE ? END, biz_no = ?, updated_at = ",
    now_signed!(),
    ", rev = rev + 1 WHERE key_hash = ? AND operation_id = ? AND rev = ? AND state IN (1, 2)"
);

/// The number of records in each state, expired ones included (they hold rows until purged):
/// `(state, count)` rows in state order.
pub const COUNT_BY_STATE: &str = concat!(
    "SELECT CAST(state AS SIGNED), COUNT(*) FROM ",
    table!(),
    " GROUP BY state ORDER BY state"
);

/// The size of the table and of its indexes, in bytes, as `information_schema` has them; no row
/// before the first migration.
pub const SIZE: &str = concat!(
    "SELECT CAST(data_length AS SIGNED), CAST(index_length AS SIGNED) FROM \
     information_schema.tables WHERE table_schema = DATABASE() AND table_name = '",
    table!(),
    "'"
);

/// idem's migration history: `version` and `description` of each migration applied, in version
/// order (no table before the first migration).
pub const MIGRATIONS: &str = concat!(
    "SELECT version, description FROM ",
    migrations_table!(),
    " ORDER BY version"
);
