//! `/minimal`: the least a correct idempotency layer sends, written by hand for each backend —
//! the second floor of `/idem` (BENCHMARKS.md, "HTTP end to end"), beside `/hand` (idem's own
//! statements by hand).
//!
//! Its own table, `idem_minimal`, of the columns such a layer cannot do without: the key hash,
//! the request hash, the state, a fencing token, the lease's and the record's end by the
//! database's clock, and the response's status, headers and body; and one index besides the key,
//! on the record's end, without which expired records cannot be deleted but by scanning them
//! all. Two statements for a fresh key:
//!
//! - the claim inserts the row, or reads the existing one in the same statement (PostgreSQL;
//!   on SQLite and MariaDB, whose `INSERT` cannot read a conflicting row, a `SELECT` after the
//!   conflict) with the database's clock read once, and returns the fence (fresh) or the state,
//!   request hash, lease, expiry, status, headers and body (a record);
//! - the completion updates state, status, headers and body, fenced by key hash, fence and
//!   state.
//!
//! On Redis one script each: the claim (`HMGET`, then `HSET` + `PEXPIRE` for a fresh key) and
//! the completion (fence checked, `HSET`).
//!
//! What idem sends that this floor lacks, each a guarantee or a feature (BENCHMARKS.md says what
//! each costs): the operation id, bound by the claim and checked by the completion (a record
//! purged and claimed afresh starts at fence 1 again: the fence alone would let the first
//! record's zombie complete the second); the readable key, the business number, the creation,
//! update and completion times and the remember window (inspection, reconciliation,
//! `latest_state`, `remember`); a clock override (tests); on Redis, the index of expiries the
//! purge and `idem stats` read. Like `/hand`, it has no lease keeper, takeover, retry, timeout
//! or telemetry; a statement that fails answers `503`.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idem::Fingerprint;
use idem::axum::Json;
use sqlx::Row;

use super::{App, BoxError, CreatePayment, Pool, charge, client_key, inserted, json_answer};

#[path = "minimal_sql.rs"]
mod sql;
use sql::{
    LITE_CLAIM, LITE_COMPLETE, LITE_SELECT, MY_CLAIM, MY_COMPLETE, MY_SELECT, NO_HEADERS, PG_CLAIM,
    PG_COMPLETE, PG_SELECT,
};

/// The lease and TTL `#[idempotent]` binds by default (30 s, 7 days), in ms.
const LEASE_MS: i64 = 30_000;
const TTL_MS: i64 = 7 * 86_400 * 1000;

/// The table, created at start (the route's own: idem's migrations know nothing of it).
pub(super) async fn create(pool: &Pool) -> Result<(), BoxError> {
    match pool {
        Pool::Memory => Ok(()),
        Pool::Postgres(p) => Ok(sql::create_postgres(p).await?),
        Pool::MySql(p) => Ok(sql::create_mysql(p).await?),
        Pool::Sqlite { writes, .. } => Ok(sql::create_sqlite(&mut *writes.lock().await).await?),
        #[cfg(feature = "redis")]
        Pool::Redis(_) => Ok(()),
    }
}

/// What the claim found.
enum Claimed {
    /// This request owns the key: run, then complete under this fence.
    Acquired(i64),
    /// A record, and the database's "now".
    Found(Found),
}

struct Found {
    request_hash: String,
    state: i64,
    lease_until: i64,
    expire_at: i64,
    status: Option<i64>,
    headers: Option<Vec<u8>>,
    body: Option<Vec<u8>>,
    now: i64,
}

/// `POST /minimal`.
pub(super) async fn minimal(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<CreatePayment>,
) -> Response {
    let Some(key) = client_key(&headers, "POST /minimal") else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let request = req.fingerprint().to_string();
    match run(&app.pool, &key.hash()[..], &request, req).await {
        Ok(response) => response,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn run(
    pool: &Pool,
    hash: &[u8],
    request: &str,
    req: CreatePayment,
) -> Result<Response, BoxError> {
    Ok(match claim(pool, hash, request).await? {
        Claimed::Acquired(fence) => {
            let (status, Json(payment)) = charge(req);
            let body = serde_json::to_vec(&payment)?;
            if !complete(pool, hash, fence, status.as_u16(), &body).await? {
                return Ok(StatusCode::CONFLICT.into_response());
            }
            json_answer(status, body, false)
        }
        Claimed::Found(found) => {
            if found.request_hash.trim_end() != request {
                StatusCode::UNPROCESSABLE_ENTITY.into_response()
            } else if found.expire_at <= found.now {
                // Expired: a layer would replace the record (a takeover); never met here.
                StatusCode::CONFLICT.into_response()
            } else if found.state == 0 {
                // In flight: `409` until the lease ends (then a layer would take it over).
                let secs = ((found.lease_until - found.now).max(0) + 999) / 1000;
                (StatusCode::CONFLICT, [("retry-after", secs.to_string())]).into_response()
            } else {
                let status = found
                    .status
                    .and_then(|s| u16::try_from(s).ok())
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .ok_or("a stored status out of range")?;
                if found.headers.as_deref() != Some(&NO_HEADERS[..]) {
                    return Err("stored headers this route never writes".into());
                }
                json_answer(status, found.body.unwrap_or_default(), true)
            }
        }
    })
}

/// A row of the claim or read-back statements of `minimal_sql.rs`: a fence in column 0 (fresh), or the
/// record from column 1 and "now" last, `state` and `resp_status` decoded as `$small` (the
/// backend's `SMALLINT`).
macro_rules! found {
    ($row:expr, $small:ty) => {{
        let row = &$row;
        match row.try_get::<Option<i64>, _>(0)? {
            Some(fence) => Claimed::Acquired(fence),
            None => Claimed::Found(Found {
                state: row.try_get::<$small, _>(1)?.into(),
                request_hash: row.try_get(2)?,
                lease_until: row.try_get(3)?,
                expire_at: row.try_get(4)?,
                status: row.try_get::<Option<$small>, _>(5)?.map(i64::from),
                headers: row.try_get(6)?,
                body: row.try_get(7)?,
                now: row.try_get(8)?,
            }),
        }
    }};
}

async fn claim(pool: &Pool, hash: &[u8], request: &str) -> Result<Claimed, BoxError> {
    match pool {
        Pool::Memory => Err("no store to write by hand".into()),
        Pool::Postgres(p) => {
            let row = sqlx::query(PG_CLAIM)
                .bind(hash)
                .bind(request)
                .bind(LEASE_MS)
                .bind(TTL_MS)
                .fetch_optional(p)
                .await?;
            match row {
                Some(row) => Ok(found!(row, i16)),
                // The conflicting row was committed after the statement's snapshot.
                None => Ok(found!(
                    sqlx::query(PG_SELECT).bind(hash).fetch_one(p).await?,
                    i16
                )),
            }
        }
        Pool::MySql(p) => {
            let result = sqlx::query(MY_CLAIM)
                .bind(hash)
                .bind(request)
                .bind(LEASE_MS)
                .bind(TTL_MS)
                .execute(p)
                .await;
            if inserted(result)? {
                return Ok(Claimed::Acquired(1));
            }
            let row = sqlx::query(MY_SELECT).bind(hash).fetch_one(p).await?;
            Ok(found!(row, i16))
        }
        Pool::Sqlite { reads, writes } => {
            let claimed = sqlx::query(LITE_CLAIM)
                .bind(hash)
                .bind(request)
                .bind(LEASE_MS)
                .bind(TTL_MS)
                .fetch_optional(&mut *writes.lock().await)
                .await?;
            if let Some(row) = claimed {
                return Ok(Claimed::Acquired(row.try_get(0)?));
            }
            Ok(found!(
                sqlx::query(LITE_SELECT).bind(hash).fetch_one(reads).await?,
                i64
            ))
        }
        #[cfg(feature = "redis")]
        Pool::Redis(conn) => redis_claim(conn, hash, request).await,
    }
}

/// The completion, fenced: whether it landed.
async fn complete(
    pool: &Pool,
    hash: &[u8],
    fence: i64,
    status: u16,
    body: &[u8],
) -> Result<bool, BoxError> {
    let status = i16::try_from(status)?;
    let done = match pool {
        Pool::Memory => return Err("no store to write by hand".into()),
        Pool::Postgres(p) => sqlx::query(PG_COMPLETE)
            .bind(hash)
            .bind(fence)
            .bind(status)
            .bind(&NO_HEADERS[..])
            .bind(body)
            .execute(p)
            .await?
            .rows_affected(),
        Pool::MySql(p) => sqlx::query(MY_COMPLETE)
            .bind(status)
            .bind(&NO_HEADERS[..])
            .bind(body)
            .bind(hash)
            .bind(fence)
            .execute(p)
            .await?
            .rows_affected(),
        Pool::Sqlite { writes, .. } => sqlx::query(LITE_COMPLETE)
            .bind(hash)
            .bind(fence)
            .bind(status)
            .bind(&NO_HEADERS[..])
            .bind(body)
            .execute(&mut *writes.lock().await)
            .await?
            .rows_affected(),
        #[cfg(feature = "redis")]
        Pool::Redis(conn) => return redis_complete(conn, hash, fence, status, body).await,
    };
    Ok(done == 1)
}

/// Redis: the scripts of `minimal_sql.rs`.
#[cfg(feature = "redis")]
static REDIS_CLAIM: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(sql::REDIS_CLAIM));
#[cfg(feature = "redis")]
static REDIS_COMPLETE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(sql::REDIS_COMPLETE));

#[cfg(feature = "redis")]
fn redis_key(hash: &[u8]) -> Vec<u8> {
    [&b"idem_minimal:"[..], hash].concat()
}

#[cfg(feature = "redis")]
async fn redis_claim(
    conn: &idem::store::redis::RedisConnection,
    hash: &[u8],
    request: &str,
) -> Result<Claimed, BoxError> {
    let mut conn = conn.clone();
    let out: Vec<redis::Value> = REDIS_CLAIM
        .key(redis_key(hash))
        .arg(request)
        .arg(LEASE_MS)
        .arg(TTL_MS)
        .invoke_async(&mut conn)
        .await?;
    let int = |i: usize| -> Result<i64, BoxError> {
        match out.get(i) {
            Some(redis::Value::Int(n)) => Ok(*n),
            Some(redis::Value::BulkString(b)) => Ok(std::str::from_utf8(b)?.parse()?),
            _ => Err(format!("no integer at {i}").into()),
        }
    };
    let bytes = |i: usize| match out.get(i) {
        Some(redis::Value::BulkString(b)) => Some(b.clone()),
        _ => None,
    };
    if int(0)? == 1 {
        return Ok(Claimed::Acquired(1));
    }
    Ok(Claimed::Found(Found {
        now: int(1)?,
        request_hash: String::from_utf8(bytes(2).unwrap_or_default())?,
        state: int(3)?,
        lease_until: int(4)?,
        expire_at: int(5)?,
        status: int(6).ok(),
        headers: bytes(7),
        body: bytes(8),
    }))
}

#[cfg(feature = "redis")]
async fn redis_complete(
    conn: &idem::store::redis::RedisConnection,
    hash: &[u8],
    fence: i64,
    status: i16,
    body: &[u8],
) -> Result<bool, BoxError> {
    let mut conn = conn.clone();
    let done: i64 = REDIS_COMPLETE
        .key(redis_key(hash))
        .arg(fence)
        .arg(status)
        .arg(&NO_HEADERS[..])
        .arg(body)
        .invoke_async(&mut conn)
        .await?;
    Ok(done == 1)
}
