//! `/hand`: what `/idem` sends its store, written by hand inside the handler — the fair floor of
//! an idempotency layer (BENCHMARKS.md, "HTTP end to end"). The very statements idem's stores
//! send (`idem::store::<backend>::sql`, the Redis store's scripts), bound and decoded here: the
//! claim (on PostgreSQL one statement that inserts or reads the existing row; on MariaDB and
//! SQLite an insert, then on a conflict a read), the handler, the completion fenced by the
//! claim's fence and operation id, and for a replay the stored status and body sent back with
//! `Idempotent-Replayed: true`. The same key scoping and request fingerprint as `/idem`.
//!
//! What it lacks against idem, said rather than hidden: no lease keeper (a handler here never
//! outlives its lease), no takeover of an expired lease or record (answered `409`), no retry of
//! a completion the store refused for the moment, no timeout on the store, no span, metrics or
//! replay cache, and its operation id is a counter (idem draws random UUIDs, 32 per system
//! call). On SQLite it writes through one connection it holds, as the store writes through its
//! writer connection, without the store's own checkpoints. A failed statement answers `503`.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idem::Fingerprint;
use idem::axum::Json;
use idem::key::ScopedKey;
use sqlx::Row;

use super::{App, BoxError, CreatePayment, Pool, charge, client_key, json_answer};

/// The lease and TTL `#[idempotent]` binds by default (30 s, 7 days), in ms.
const LEASE_MS: i64 = 30_000;
const TTL_MS: i64 = 7 * 86_400 * 1000;
/// The claim's remember window: none (0), as idem binds it for a handler without `remember`.
const NOT_REMEMBERED: i64 = 0;
/// The clock override the statements bind: none, the database's clock decides.
const SERVER_CLOCK: Option<i64> = None;
/// The empty header blob idem stores for a response with no whitelisted header.
const NO_HEADERS: [u8; 5] = [1, 0, 0, 0, 0];

/// What the claim found.
enum Claimed {
    /// This request owns the key: run, then complete under this fence.
    Acquired(i64),
    /// A record: its request hash, state, status and body, and whether it is live.
    Found {
        request_hash: String,
        state: i64,
        status: Option<i64>,
        body: Option<Vec<u8>>,
        live: bool,
    },
}

static OPERATIONS: AtomicU64 = AtomicU64::new(0);

/// `POST /hand`.
pub(super) async fn by_hand(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<CreatePayment>,
) -> Response {
    let Some(key) = client_key(&headers, "POST /hand") else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let request = req.fingerprint().to_string();
    let operation_id = format!("{:036}", OPERATIONS.fetch_add(1, Ordering::Relaxed));
    match run(&app.pool, &key, &request, &operation_id, req).await {
        Ok(response) => response,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn run(
    pool: &Pool,
    key: &ScopedKey,
    request: &str,
    operation_id: &str,
    req: CreatePayment,
) -> Result<Response, BoxError> {
    match claim(pool, key, request, operation_id).await? {
        Claimed::Acquired(fence) => {
            let (status, Json(payment)) = charge(req);
            let body = serde_json::to_vec(&payment)?;
            let biz_no = payment.payment_id.as_str();
            let done = complete(pool, key, fence, operation_id, status, &body, biz_no).await?;
            if !done {
                return Ok(StatusCode::CONFLICT.into_response());
            }
            Ok(json_answer(status, body, false))
        }
        Claimed::Found {
            request_hash,
            state,
            status,
            body,
            live,
        } => Ok(if request_hash.trim() != request {
            StatusCode::UNPROCESSABLE_ENTITY.into_response()
        } else if state != 1 || !live {
            StatusCode::CONFLICT.into_response()
        } else {
            let status = status
                .and_then(|s| u16::try_from(s).ok())
                .and_then(|s| StatusCode::from_u16(s).ok())
                .ok_or("a stored status out of range")?;
            json_answer(status, body.unwrap_or_default(), true)
        }),
    }
}

/// The record columns as idem's stores read them, from column `$first` (`idem_key,
/// request_hash, state, operation_id, fence, rev, resp_status, resp_headers, resp_body,
/// biz_no, locked_at, lease_until, expire_at, created_at, updated_at, completed_at, replay_until`), then the
/// database's "now".
macro_rules! found {
    ($row:expr, $first:expr, $state:ty, $status:ty) => {{
        let row = &$row;
        let state: $state = row.try_get($first + 2)?;
        let status: Option<$status> = row.try_get($first + 6)?;
        let expire_at: i64 = row.try_get($first + 12)?;
        let now: i64 = row.try_get($first + 17)?;
        Claimed::Found {
            request_hash: row.try_get($first + 1)?,
            state: i64::from(state),
            status: status.map(i64::from),
            body: row.try_get($first + 8)?,
            live: expire_at > now,
        }
    }};
}

async fn claim(
    pool: &Pool,
    key: &ScopedKey,
    request: &str,
    operation_id: &str,
) -> Result<Claimed, BoxError> {
    let (hash, readable) = (&key.hash()[..], key.readable());
    match pool {
        Pool::Memory => Err("no store to write by hand".into()),
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => {
            let row = sqlx::query(idem::store::postgres::sql::claim())
                .bind(hash)
                .bind(readable)
                .bind(request)
                .bind(operation_id)
                .bind(SERVER_CLOCK)
                .bind(LEASE_MS)
                .bind(TTL_MS)
                .bind(NOT_REMEMBERED)
                .fetch_one(p)
                .await?;
            // `claimed`, then the record columns from 1 (`fence` the fifth), then the time.
            Ok(if row.try_get::<bool, _>(0)? {
                Claimed::Acquired(row.try_get(5)?)
            } else {
                found!(row, 1, i16, i16)
            })
        }
        #[cfg(not(feature = "postgres"))]
        Pool::Postgres(_) => Err("needs `--features postgres`".into()),
        Pool::Sqlite { reads, writes } => {
            // `RETURNING fence, operation_id, lease_until, expire_at`, nothing on a conflict.
            let claimed = sqlx::query(idem::store::sqlite::sql::CLAIM)
                .bind(hash)
                .bind(readable)
                .bind(request)
                .bind(operation_id)
                .bind(SERVER_CLOCK)
                .bind(LEASE_MS)
                .bind(TTL_MS)
                .bind(NOT_REMEMBERED)
                .fetch_optional(&mut *writes.lock().await)
                .await?;
            if let Some(row) = claimed {
                return Ok(Claimed::Acquired(row.try_get(0)?));
            }
            let row = sqlx::query(idem::store::sqlite::sql::select())
                .bind(hash)
                .bind(SERVER_CLOCK)
                .fetch_one(reads)
                .await?;
            Ok(found!(row, 0, i64, i64))
        }
        #[cfg(feature = "mysql")]
        Pool::MySql(p) => {
            // Positional, and without the clock override, as a store without one sends it.
            let result = sqlx::query(idem::store::mysql::sql::insert())
                .bind(hash)
                .bind(readable)
                .bind(request)
                .bind(operation_id)
                .bind(LEASE_MS)
                .bind(LEASE_MS)
                .bind(TTL_MS)
                .bind(NOT_REMEMBERED)
                .bind(LEASE_MS)
                .bind(TTL_MS)
                .execute(p)
                .await;
            if super::inserted(result)? {
                return Ok(Claimed::Acquired(1));
            }
            let row = sqlx::query(idem::store::mysql::sql::select())
                .bind(hash)
                .fetch_one(p)
                .await?;
            Ok(found!(row, 0, i8, i16))
        }
        #[cfg(not(feature = "mysql"))]
        Pool::MySql(_) => Err("needs `--features mysql`".into()),
        #[cfg(feature = "redis")]
        Pool::Redis(conn) => redis_claim(conn, key, request, operation_id).await,
    }
}

/// The completion, fenced: whether it landed.
async fn complete(
    pool: &Pool,
    key: &ScopedKey,
    fence: i64,
    operation_id: &str,
    status: StatusCode,
    body: &[u8],
    biz_no: &str,
) -> Result<bool, BoxError> {
    let hash = &key.hash()[..];
    let status = i16::try_from(status.as_u16())?;
    let done = match pool {
        Pool::Memory => return Err("no store to write by hand".into()),
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => sqlx::query(idem::store::postgres::sql::COMPLETE)
            .bind(hash)
            .bind(fence)
            .bind(1i16)
            .bind(status)
            .bind(&NO_HEADERS[..])
            .bind(body)
            .bind(Some(biz_no))
            .bind(SERVER_CLOCK)
            .bind(operation_id)
            .execute(p)
            .await?
            .rows_affected(),
        #[cfg(not(feature = "postgres"))]
        Pool::Postgres(_) => return Err("needs `--features postgres`".into()),
        Pool::Sqlite { writes, .. } => sqlx::query(idem::store::sqlite::sql::COMPLETE)
            .bind(hash)
            .bind(fence)
            .bind(1i64)
            .bind(i64::from(status))
            .bind(&NO_HEADERS[..])
            .bind(body)
            .bind(Some(biz_no))
            .bind(SERVER_CLOCK)
            .bind(operation_id)
            .execute(&mut *writes.lock().await)
            .await?
            .rows_affected(),
        #[cfg(feature = "mysql")]
        Pool::MySql(p) => sqlx::query(idem::store::mysql::sql::complete())
            .bind(1i16)
            .bind(status)
            .bind(&NO_HEADERS[..])
            .bind(body)
            .bind(Some(biz_no))
            .bind(hash)
            .bind(fence)
            .bind(operation_id)
            .execute(p)
            .await?
            .rows_affected(),
        #[cfg(not(feature = "mysql"))]
        Pool::MySql(_) => return Err("needs `--features mysql`".into()),
        #[cfg(feature = "redis")]
        Pool::Redis(conn) => {
            return redis_complete(conn, key, fence, operation_id, status, body, biz_no).await;
        }
    };
    Ok(done == 1)
}

/// The expiry margin the Redis store passes by default (ms).
#[cfg(feature = "redis")]
const REDIS_MARGIN_MS: i64 = 300_000;

#[cfg(feature = "redis")]
static REDIS_CLAIM: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(idem::store::redis::scripts::CLAIM));
#[cfg(feature = "redis")]
static REDIS_COMPLETE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(idem::store::redis::scripts::COMPLETE));

/// The store's claim script, under the store's default prefix `idem:`.
#[cfg(feature = "redis")]
async fn redis_claim(
    conn: &idem::store::redis::RedisConnection,
    key: &ScopedKey,
    request: &str,
    operation_id: &str,
) -> Result<Claimed, BoxError> {
    let hex = key.hash_hex().to_string();
    let mut conn = conn.clone();
    let out: Vec<redis::Value> = REDIS_CLAIM
        .key(format!("idem:rec:{hex}"))
        .key("idem:expire_at")
        .key("idem:replay_until")
        .arg(key.readable())
        .arg(request)
        .arg(operation_id)
        .arg("")
        .arg(LEASE_MS)
        .arg(TTL_MS)
        .arg(REDIS_MARGIN_MS)
        .arg(&hex)
        .arg(NOT_REMEMBERED)
        .invoke_async(&mut conn)
        .await?;
    let int = |i: usize| -> Result<i64, BoxError> {
        match out.get(i) {
            Some(redis::Value::Int(n)) => Ok(*n),
            Some(redis::Value::BulkString(b)) => Ok(std::str::from_utf8(b)?.parse()?),
            _ => Ok(0),
        }
    };
    let bytes = |i: usize| match out.get(i) {
        Some(redis::Value::BulkString(b)) => Some(b.clone()),
        _ => None,
    };
    // `{1, fence, ..}` acquired (`2`: taken over, which this route does not do); `{3, now,
    // idem_key, request_hash, state, operation_id, fence, resp_status, resp_headers,
    // resp_body, biz_no, locked_at, lease_until, expire_at, ..}` a record.
    Ok(match int(0)? {
        1 => Claimed::Acquired(int(1)?),
        3 => Claimed::Found {
            request_hash: String::from_utf8(bytes(3).unwrap_or_default())?,
            state: int(4)?,
            status: Some(int(7)?),
            body: bytes(9),
            live: int(13)? > int(1)?,
        },
        _ => Claimed::Found {
            request_hash: request.to_owned(),
            state: 0,
            status: None,
            body: None,
            live: true,
        },
    })
}

/// The store's completion script: whether it landed.
#[cfg(feature = "redis")]
async fn redis_complete(
    conn: &idem::store::redis::RedisConnection,
    key: &ScopedKey,
    fence: i64,
    operation_id: &str,
    status: i16,
    body: &[u8],
    biz_no: &str,
) -> Result<bool, BoxError> {
    let hex = key.hash_hex().to_string();
    let mut conn = conn.clone();
    let done: i64 = REDIS_COMPLETE
        .key(format!("idem:rec:{hex}"))
        .key("idem:expire_at")
        .arg(fence)
        .arg(operation_id)
        .arg(1)
        .arg(status)
        .arg(&NO_HEADERS[..])
        .arg(body)
        .arg("1")
        .arg(biz_no)
        .arg("")
        .arg("")
        .arg(REDIS_MARGIN_MS)
        .arg(&hex)
        .invoke_async(&mut conn)
        .await?;
    Ok(done == 2)
}
