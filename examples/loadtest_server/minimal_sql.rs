//! The statements of `/minimal` (`minimal.rs`), the least a correct idempotency layer sends, and
//! its table: shared with `benches/store.rs`, which measures the stores against them in process.

/// The empty header blob idem stores for a response with no whitelisted header.
pub const NO_HEADERS: [u8; 5] = [1, 0, 0, 0, 0];

/// The columns every backend's table has, besides the key and the response's blobs.
macro_rules! columns {
    () => {
        "request_hash CHAR(64) NOT NULL, state SMALLINT NOT NULL, fence BIGINT NOT NULL, \
         lease_until BIGINT NOT NULL, expire_at BIGINT NOT NULL, resp_status SMALLINT"
    };
}

/// The index of the records' ends (PostgreSQL, SQLite).
const INDEX: &str = "CREATE INDEX IF NOT EXISTS idem_minimal_expire_at ON idem_minimal (expire_at)";

/// The table on PostgreSQL (the floor's own: idem's migrations know nothing of it).
pub async fn create_postgres(p: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    sqlx::query(concat!(
        "CREATE TABLE IF NOT EXISTS idem_minimal (key_hash BYTEA PRIMARY KEY, ",
        columns!(),
        ", resp_headers BYTEA, resp_body BYTEA)"
    ))
    .execute(p)
    .await?;
    sqlx::query(INDEX).execute(p).await?;
    Ok(())
}

/// The table on MariaDB.
pub async fn create_mysql(p: &sqlx::MySqlPool) -> Result<(), sqlx::Error> {
    sqlx::query(concat!(
        "CREATE TABLE IF NOT EXISTS idem_minimal (key_hash BINARY(32) PRIMARY KEY, ",
        columns!(),
        ", resp_headers BLOB, resp_body MEDIUMBLOB, \
         INDEX idem_minimal_expire_at (expire_at)) ENGINE = InnoDB"
    ))
    .execute(p)
    .await?;
    Ok(())
}

/// The table on SQLite.
pub async fn create_sqlite(conn: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
    sqlx::query(concat!(
        "CREATE TABLE IF NOT EXISTS idem_minimal (key_hash BLOB PRIMARY KEY, ",
        columns!(),
        ", resp_headers BLOB, resp_body BLOB) WITHOUT ROWID"
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query(INDEX).execute(&mut *conn).await?;
    Ok(())
}

/// PostgreSQL: insert, or read the existing row, in one statement; the clock read once.
pub const PG_CLAIM: &str = "WITH t AS (SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS now), \
     ins AS (INSERT INTO idem_minimal (key_hash, request_hash, state, fence, lease_until, expire_at) \
       SELECT $1, $2, 0, 1, now + $3, now + $4 FROM t \
       ON CONFLICT (key_hash) DO NOTHING RETURNING fence) \
     SELECT fence, NULL::smallint, NULL::char(64), NULL::bigint, NULL::bigint, NULL::smallint, \
       NULL::bytea, NULL::bytea, NULL::bigint FROM ins \
     UNION ALL \
     SELECT NULL, r.state, r.request_hash, r.lease_until, r.expire_at, r.resp_status, \
       r.resp_headers, r.resp_body, t.now FROM idem_minimal r, t \
     WHERE r.key_hash = $1 AND NOT EXISTS (SELECT 1 FROM ins)";
pub const PG_SELECT: &str = "SELECT NULL::bigint, state, request_hash, lease_until, expire_at, \
     resp_status, resp_headers, resp_body, \
     floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint \
     FROM idem_minimal WHERE key_hash = $1";
pub const PG_COMPLETE: &str = "UPDATE idem_minimal SET state = 1, resp_status = $3, \
     resp_headers = $4, resp_body = $5 WHERE key_hash = $1 AND fence = $2 AND state = 0";

/// MariaDB: the insert; on a duplicate key, the row. `UTC_TIMESTAMP(6)` is one value per
/// statement.
macro_rules! my_now {
    () => {
        "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000)"
    };
}
pub const MY_CLAIM: &str = concat!(
    "INSERT INTO idem_minimal (key_hash, request_hash, state, fence, lease_until, expire_at) \
     VALUES (?, ?, 0, 1, ",
    my_now!(),
    " + ?, ",
    my_now!(),
    " + ?)"
);
pub const MY_SELECT: &str = concat!(
    "SELECT NULL, state, request_hash, lease_until, expire_at, resp_status, resp_headers, \
     resp_body, CAST(",
    my_now!(),
    " AS SIGNED) FROM idem_minimal WHERE key_hash = ?"
);
pub const MY_COMPLETE: &str = "UPDATE idem_minimal SET state = 1, resp_status = ?, \
     resp_headers = ?, resp_body = ? WHERE key_hash = ? AND fence = ? AND state = 0";

/// SQLite: the insert, nothing returned on a conflict; then the row.
macro_rules! lite_now {
    () => {
        "CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"
    };
}
pub const LITE_CLAIM: &str = concat!(
    "INSERT INTO idem_minimal (key_hash, request_hash, state, fence, lease_until, expire_at) \
     SELECT ?1, ?2, 0, 1, now + ?3, now + ?4 FROM (SELECT ",
    lite_now!(),
    " AS now) WHERE true ON CONFLICT (key_hash) DO NOTHING RETURNING fence"
);
pub const LITE_SELECT: &str = concat!(
    "SELECT NULL, state, request_hash, lease_until, expire_at, resp_status, resp_headers, \
     resp_body, ",
    lite_now!(),
    " FROM idem_minimal WHERE key_hash = ?1"
);
pub const LITE_COMPLETE: &str = "UPDATE idem_minimal SET state = 1, resp_status = ?3, \
     resp_headers = ?4, resp_body = ?5 WHERE key_hash = ?1 AND fence = ?2 AND state = 0";

/// Redis: the record's hash, kept until its end (`PEXPIRE`); "now" from `TIME`. `KEYS[1]` the
/// record, `ARGV` the request hash, lease ms, TTL ms. Returns `{1}` (claimed, fence 1) or `{0,
/// now, request_hash, state, lease_until, expire_at, resp_status, resp_headers, resp_body}`.
#[cfg(feature = "redis")]
pub const REDIS_CLAIM: &str = "local r = redis.call('HMGET', KEYS[1], 'request_hash', 'state', \
       'lease_until', 'expire_at', 'resp_status', 'resp_headers', 'resp_body') \
     local t = redis.call('TIME') \
     local now = t[1] * 1000 + math.floor(t[2] / 1000) \
     if r[1] then return {0, now, r[1], r[2], r[3], r[4], r[5], r[6], r[7]} end \
     local lease, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]) \
     redis.call('HSET', KEYS[1], 'request_hash', ARGV[1], 'state', '0', 'fence', '1', \
       'lease_until', string.format('%d', now + lease), \
       'expire_at', string.format('%d', now + ttl)) \
     redis.call('PEXPIRE', KEYS[1], ttl) \
     return {1}";

/// Redis: the completion, fenced (`ARGV`: fence, status, headers, body); 1 when it landed.
#[cfg(feature = "redis")]
pub const REDIS_COMPLETE: &str = "local r = redis.call('HMGET', KEYS[1], 'fence', 'state') \
     if r[1] ~= ARGV[1] or r[2] ~= '0' then return 0 end \
     redis.call('HSET', KEYS[1], 'state', '1', 'resp_status', ARGV[2], \
       'resp_headers', ARGV[3], 'resp_body', ARGV[4]) \
     return 1";
