//! Store overhead: `claim + complete` and `replay` through idem's stores, each against the very
//! same SQL statements hand-written with sqlx, in the same run, against the same database.
//!
//! Run with `scripts/bench` (starts throwaway PostgreSQL, MariaDB and Redis servers, like
//! `scripts/test`); a backend whose URL (`IDEM_TEST_POSTGRES_URL`, `IDEM_TEST_MYSQL_URL`,
//! `IDEM_TEST_REDIS_URL`) is unset is skipped. Redis's baseline is the store's own Lua scripts
//! (`idem::store::redis::scripts`) invoked by hand with the `redis` crate. idem and the baseline alternate operation by operation so that drift on a shared
//! machine hits both alike; the table reports medians over the rounds. Not criterion:
//! what matters here is the ratio of two interleaved measurements, printed as a Markdown table.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::MemoryStore;
use idem::MySqlStore;
use idem::PostgresStore;
use idem::RedisStore;
use idem::RequestHash;
use idem::SqliteStore;
use idem::key::ScopedKey;
use idem::store::{Claim, ClaimRequest, Completion, Outcome, Store};
use sha2::{Digest, Sha256};
use sqlx::{MySqlPool, PgPool, Row, SqlitePool};

#[path = "../examples/loadtest_server/minimal_sql.rs"]
#[allow(dead_code)]
mod minimal;

const ROUNDS: usize = 15;
const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);
/// [`LEASE`] and [`TTL`] as the stores bind them: durations in milliseconds, which every
/// statement adds to the database's "now".
const LEASE_MS: i64 = LEASE.as_millis() as i64;
const TTL_MS: i64 = TTL.as_millis() as i64;
/// The claim's remember window: none (0), as idem binds it for a handler without `remember`.
const NOT_REMEMBERED: i64 = 0;
/// The clock override every statement binds (MariaDB's once per read of the time): `NULL`, so
/// that the database's clock decides, as in production (`with_clock` is for tests).
const SERVER_CLOCK: Option<i64> = None;
/// How many completed records the replays read in turn.
const REPLAY_KEYS: usize = 50;

/// The operation id the baseline binds (idem draws a random one).
const OPERATION_ID: &str = "00000000-0000-4000-8000-000000000000";

static N: AtomicU64 = AtomicU64::new(0);

/// A fresh client key.
fn fresh(label: &str) -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{label}-{t}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn body() -> Vec<u8> {
    br#"{"id":"pay_123","amount":"100.00","currency":"EUR","status":"succeeded"}"#.to_vec()
}

/// What the baseline has precomputed: the key hash, the request hash text and an operation id.
struct Raw {
    key_hash: Vec<u8>,
    readable: String,
    request_hex: String,
    operation_id: String,
}

fn raw(client: &str) -> Raw {
    Raw {
        key_hash: Sha256::digest(client.as_bytes()).to_vec(),
        readable: format!("t:u:POST /payments:{client}"),
        request_hex: "ab".repeat(32),
        operation_id: OPERATION_ID.to_owned(),
    }
}

/// `client`'s key, as idem scopes it.
fn key(client: &str) -> ScopedKey {
    ScopedKey::new(&["t", "u"], "POST /payments", client).unwrap()
}

async fn idem_claim_complete(store: &dyn Store, client: &str) {
    idem_claim_complete_remembering(store, client, None).await;
}

/// `claim + complete` of `client`'s key, remembered for `remember` past the TTL if given.
async fn idem_claim_complete_remembering(
    store: &dyn Store,
    client: &str,
    remember: Option<Duration>,
) {
    let key = key(client);
    let mut req = ClaimRequest::new(&key, RequestHash::of_bytes(b"{}"), LEASE, TTL);
    if let Some(remember) = remember {
        req = req.remembering(remember);
    }
    let Claim::Acquired(lease) = store.claim(&req).await.unwrap() else {
        panic!("not acquired")
    };
    let done = Completion::new(Outcome::Completed, 201, body()).with_biz_no("PAY-1");
    store.complete(&lease, &done).await.unwrap();
}

async fn idem_replay(store: &dyn Store, client: &str) {
    let key = key(client);
    let req = ClaimRequest::new(&key, RequestHash::of_bytes(b"{}"), LEASE, TTL);
    let Claim::Completed(rec) = store.claim(&req).await.unwrap() else {
        panic!("not completed")
    };
    assert_eq!(rec.status, Some(201));
}

/// Median per-op microseconds of `a` and `b` over `ROUNDS` rounds of `n` ops each. The two
/// alternate operation by operation (which goes first flips every operation), so that a load
/// change on the shared machine hits both alike.
async fn pair<A, B, FA, FB>(n: usize, mut a: A, mut b: B) -> (f64, f64)
where
    A: FnMut(usize) -> FA,
    B: FnMut(usize) -> FB,
    FA: Future<Output = ()>,
    FB: Future<Output = ()>,
{
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS + 1 {
        let (mut run_a, mut run_b) = (Duration::ZERO, Duration::ZERO);
        for i in 0..n {
            let op = round * n + i;
            for a_first in [true, false] {
                if a_first == op.is_multiple_of(2) {
                    let start = Instant::now();
                    a(op).await;
                    run_a += start.elapsed();
                } else {
                    let start = Instant::now();
                    b(op).await;
                    run_b += start.elapsed();
                }
            }
        }
        if round > 0 {
            // round 0 is the warm-up
            ta.push(run_a.as_secs_f64() * 1e6 / n as f64);
            tb.push(run_b.as_secs_f64() * 1e6 / n as f64);
        }
    }
    (median(ta), median(tb))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn row(backend: &str, path: &str, idem: f64, base: Option<f64>) {
    match base {
        Some(base) => println!(
            "| {backend} | {path} | {idem:.1} | {base:.1} | {:.3}x |",
            idem / base
        ),
        None => println!("| {backend} | {path} | {idem:.2} | - | - |"),
    }
}

/// Pre-creates `count` completed records through idem for the replay benchmarks.
async fn completed(store: &dyn Store, label: &str, count: usize) -> Vec<String> {
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        let k = fresh(label);
        idem_claim_complete(store, &k).await;
        keys.push(k);
    }
    keys
}

/// The hand-written sqlx side of one backend: the very statements its store runs
/// (`idem::store::<backend>::sql`), bound and decoded by hand. One implementation per backend,
/// because the statements, their parameters and their column types differ; the measurement
/// around them ([`bench`]) is the same for all.
trait Baseline: Replay {
    /// `claim + complete` of a fresh key labelled `label`, precomputed as [`Raw`]. The key is made
    /// here, not by the caller, so that it is timed as idem's is.
    async fn claim_complete(&self, label: &str);
}

/// The hand-written side of a replay of `client`'s completed record: decodes what a replay needs.
trait Replay: Clone {
    async fn replay(&self, client: &str);
}

/// No baseline (memory: there is no SQL to write by hand). Never made: it only names the type
/// of a `None`.
impl Baseline for Infallible {
    async fn claim_complete(&self, _: &str) {
        match *self {}
    }
}

impl Replay for Infallible {
    async fn replay(&self, _: &str) {
        match *self {}
    }
}

/// Measures `claim + complete` and `replay` of one backend (`n` operations a round) through
/// `store` and, when there is one, against `base`, and prints their two rows, named by `paths`.
/// `label` prefixes the keys. Returns the keys of the completed records the replays read.
async fn bench<S, B>(
    backend: &str,
    paths: [&str; 2],
    label: &str,
    n: usize,
    store: &S,
    base: Option<&B>,
) -> Arc<Vec<String>>
where
    S: Store + Clone,
    B: Baseline,
{
    let (cc, cc_raw) = (format!("{label}-cc"), format!("{label}-cc-raw"));
    let (cc, cc_raw) = (cc.as_str(), cc_raw.as_str());
    let idem = |_: usize| {
        let store = store.clone();
        async move { idem_claim_complete(&store, &fresh(cc)).await }
    };
    let hand = base.map(|base| {
        move |_: usize| {
            let base = base.clone();
            async move { base.claim_complete(cc_raw).await }
        }
    });
    let (idem, hand) = against(n, idem, hand).await;
    row(backend, paths[0], idem, hand);

    let keys = Arc::new(completed(store, &format!("{label}-rp"), REPLAY_KEYS).await);
    let (idem, hand) = replays(n, store, &keys, base).await;
    row(backend, paths[1], idem, hand);
    keys
}

/// [`pair`] of idem's replays of the completed `keys` in turn against `base`'s (`None`: against
/// nothing, whose time is not reported).
async fn replays<S, B>(
    n: usize,
    store: &S,
    keys: &Arc<Vec<String>>,
    base: Option<&B>,
) -> (f64, Option<f64>)
where
    S: Store + Clone,
    B: Replay,
{
    let idem = |i: usize| {
        let (store, keys) = (store.clone(), keys.clone());
        async move { idem_replay(&store, &keys[i % keys.len()]).await }
    };
    let hand = base.map(|base| {
        move |i: usize| {
            let (base, keys) = (base.clone(), keys.clone());
            async move { base.replay(&keys[i % keys.len()]).await }
        }
    });
    against(n, idem, hand).await
}

/// [`pair`] of `a` against `b` or, without one, against nothing: `async {}`, whose time is not
/// reported (rather than a `None` checked on every operation).
async fn against<A, B, FA, FB>(n: usize, a: A, b: Option<B>) -> (f64, Option<f64>)
where
    A: FnMut(usize) -> FA,
    B: FnMut(usize) -> FB,
    FA: Future<Output = ()>,
    FB: Future<Output = ()>,
{
    match b {
        Some(b) => {
            let (a, b) = pair(n, a, b).await;
            (a, Some(b))
        }
        None => (pair(n, a, |_| async {}).await.0, None),
    }
}

/// Binds PostgreSQL's and SQLite's claim (same parameters): key hash, readable key, request
/// hash, operation id, clock override, lease ms, TTL ms. `claim!(sql, r)` binds those of a
/// [`Raw`] `r`.
macro_rules! claim {
    ($sql:expr, $r:ident) => {
        claim!(
            $sql,
            &$r.key_hash,
            &$r.readable,
            &$r.request_hex,
            &$r.operation_id
        )
    };
    ($sql:expr, $hash:expr, $readable:expr, $request:expr, $operation_id:expr) => {
        sqlx::query($sql)
            .bind($hash)
            .bind($readable)
            .bind($request)
            .bind($operation_id)
            .bind(SERVER_CLOCK)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .bind(NOT_REMEMBERED)
    };
}

/// Binds MariaDB's claim `INSERT` as a store without a clock override sends it: key hash,
/// readable key, request hash, operation id, then lease ms, lease ms, TTL ms, remember ms, lease
/// ms, TTL ms (positional parameters).
macro_rules! insert {
    ($hash:expr, $readable:expr, $request:expr, $operation_id:expr) => {
        sqlx::query(idem::store::mysql::sql::insert())
            .bind($hash)
            .bind($readable)
            .bind($request)
            .bind($operation_id)
            .bind(LEASE_MS)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .bind(NOT_REMEMBERED)
            .bind(LEASE_MS)
            .bind(TTL_MS)
    };
}

/// Binds PostgreSQL's and SQLite's `COMPLETE` (same parameters; outcome and status are `$int`):
/// key hash, fence, then a `Completed` 201 with the snapshot idem stores for [`body`] (the
/// record keeps its expiry), the clock override and the operation id.
macro_rules! complete {
    ($sql:expr, $int:ty, $hash:expr, $fence:expr, $operation_id:expr) => {
        sqlx::query($sql)
            .bind($hash)
            .bind($fence)
            .bind::<$int>(1)
            .bind::<$int>(201)
            .bind(vec![1u8, 0, 0, 0, 0])
            .bind(body())
            .bind(Some("PAY-1"))
            .bind(SERVER_CLOCK)
            .bind($operation_id)
    };
}

/// Decodes what a replay needs from a row whose record columns (`idem_key, request_hash, state,
/// ..`, as idem reads them) start at column `$first`, followed by the database's "now": the
/// stored request hash (the 422 check), state, snapshot, and expiry against that "now", as the
/// backend's types. True when the record is the live completed 201 of `$request`.
macro_rules! replayed {
    ($row:expr, $first:expr, $request:expr, $state:ty, $status:ty) => {{
        let row = &$row;
        let hash: String = row.get($first + 1);
        let state: $state = row.get($first + 2);
        let status: Option<$status> = row.get($first + 6);
        let _headers: Option<Vec<u8>> = row.get($first + 7);
        let body: Option<Vec<u8>> = row.get($first + 8);
        let _biz_no: Option<String> = row.get($first + 9);
        let expire_at: i64 = row.get($first + 12);
        let db_now: i64 = row.get($first + 17);
        hash == $request
            && state == 1
            && expire_at > db_now
            && status == Some(201)
            && body.is_some()
    }};
}

#[derive(Clone)]
struct Postgres(PgPool);

impl Baseline for Postgres {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        let sql = idem::store::postgres::sql::claim();
        let row = claim!(sql, r).fetch_one(&self.0).await.unwrap();
        // `claimed`, then the record columns from 1 (`fence` is the fifth), then the time.
        let claimed: bool = row.get(0);
        let fence: i64 = row.get(5);
        assert!(claimed);
        let sql = idem::store::postgres::sql::COMPLETE;
        let done = complete!(sql, i16, &r.key_hash, fence, &r.operation_id)
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for Postgres {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let (hash, readable) = (&key.hash()[..], key.readable());
        let request = RequestHash::of_bytes(b"{}").to_string();
        let sql = idem::store::postgres::sql::claim();
        let row = claim!(sql, hash, readable, &request, OPERATION_ID)
            .fetch_one(&self.0)
            .await
            .unwrap();
        let claimed: bool = row.get(0);
        let replayed = replayed!(row, 1, request, i16, i16);
        assert!(!claimed && replayed);
    }
}

/// A backend's minimal layer (`examples/loadtest_server/minimal_sql.rs`): its table, and a
/// fresh key claimed and completed.
trait MinimalFloor: Replay {
    /// Creates the floor's table (nothing on Redis).
    async fn create(&self) {}

    /// Claims and completes `key_hash` for `request`.
    async fn claim_complete_key(&self, key_hash: &[u8], request: &str);

    /// The records idem's replays read, in the floor's table.
    async fn seed(&self, keys: &[String]) {
        self.create().await;
        let request = RequestHash::of_bytes(b"{}").to_string();
        for k in keys {
            self.claim_complete_key(&key(k).hash()[..], &request).await;
        }
    }
}

impl<F: MinimalFloor> Baseline for F {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        self.claim_complete_key(&r.key_hash, &r.request_hex).await;
    }
}

/// The least a correct layer sends on PostgreSQL (`examples/loadtest_server/minimal_sql.rs`):
/// the second floor, on a table of its own.
#[derive(Clone)]
struct PgMinimal(PgPool);

impl MinimalFloor for PgMinimal {
    async fn create(&self) {
        minimal::create_postgres(&self.0).await.unwrap();
    }

    /// Claims and completes `key_hash` for `request`.
    async fn claim_complete_key(&self, key_hash: &[u8], request: &str) {
        let row = sqlx::query(minimal::PG_CLAIM)
            .bind(key_hash)
            .bind(request)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .fetch_one(&self.0)
            .await
            .unwrap();
        let fence: Option<i64> = row.get(0);
        let done = sqlx::query(minimal::PG_COMPLETE)
            .bind(key_hash)
            .bind(fence.expect("claimed"))
            .bind(201i16)
            .bind(&minimal::NO_HEADERS[..])
            .bind(body())
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for PgMinimal {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let request = RequestHash::of_bytes(b"{}").to_string();
        let row = sqlx::query(minimal::PG_CLAIM)
            .bind(&key.hash()[..])
            .bind(&request)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .fetch_one(&self.0)
            .await
            .unwrap();
        let (fence, state, hash): (Option<i64>, i16, String) = (row.get(0), row.get(1), row.get(2));
        let (expire_at, status, body, now): (i64, Option<i16>, Option<Vec<u8>>, i64) =
            (row.get(4), row.get(5), row.get(7), row.get(8));
        assert!(fence.is_none() && state == 1 && hash == request && expire_at > now);
        assert!(status == Some(201) && body.is_some());
    }
}

/// The least a correct layer sends on MariaDB: an `INSERT`, on a duplicate a `SELECT`.
#[derive(Clone)]
struct MyMinimal(MySqlPool);

impl MinimalFloor for MyMinimal {
    async fn create(&self) {
        minimal::create_mysql(&self.0).await.unwrap();
    }

    async fn claim_complete_key(&self, key_hash: &[u8], request: &str) {
        sqlx::query(minimal::MY_CLAIM)
            .bind(key_hash)
            .bind(request)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .execute(&self.0)
            .await
            .unwrap();
        let done = sqlx::query(minimal::MY_COMPLETE)
            .bind(201i16)
            .bind(&minimal::NO_HEADERS[..])
            .bind(body())
            .bind(key_hash)
            .bind(1i64)
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for MyMinimal {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let hash = &key.hash()[..];
        let request = RequestHash::of_bytes(b"{}").to_string();
        let err = sqlx::query(minimal::MY_CLAIM)
            .bind(hash)
            .bind(&request)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .execute(&self.0)
            .await
            .unwrap_err();
        let db = err.as_database_error().unwrap();
        assert_eq!(db.code().as_deref(), Some("23000"));
        let row = sqlx::query(minimal::MY_SELECT)
            .bind(hash)
            .fetch_one(&self.0)
            .await
            .unwrap();
        let (state, stored, expire_at): (i16, String, i64) = (row.get(1), row.get(2), row.get(4));
        let (status, body, now): (Option<i16>, Option<Vec<u8>>, i64) =
            (row.get(5), row.get(7), row.get(8));
        assert!(state == 1 && stored == request && expire_at > now);
        assert!(status == Some(201) && body.is_some());
    }
}

/// The least a correct layer sends on SQLite: an `INSERT .. ON CONFLICT DO NOTHING RETURNING`,
/// on a conflict a `SELECT`.
#[derive(Clone)]
struct SqliteMinimal(SqlitePool);

impl MinimalFloor for SqliteMinimal {
    async fn create(&self) {
        let mut conn = self.0.acquire().await.unwrap();
        minimal::create_sqlite(&mut conn).await.unwrap();
    }

    async fn claim_complete_key(&self, key_hash: &[u8], request: &str) {
        let row = sqlx::query(minimal::LITE_CLAIM)
            .bind(key_hash)
            .bind(request)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .fetch_one(&self.0)
            .await
            .unwrap();
        let fence: i64 = row.get(0);
        let done = sqlx::query(minimal::LITE_COMPLETE)
            .bind(key_hash)
            .bind(fence)
            .bind(201i64)
            .bind(&minimal::NO_HEADERS[..])
            .bind(body())
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for SqliteMinimal {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let hash = &key.hash()[..];
        let request = RequestHash::of_bytes(b"{}").to_string();
        let claimed = sqlx::query(minimal::LITE_CLAIM)
            .bind(hash)
            .bind(&request)
            .bind(LEASE_MS)
            .bind(TTL_MS)
            .fetch_optional(&self.0)
            .await
            .unwrap();
        assert!(claimed.is_none());
        let row = sqlx::query(minimal::LITE_SELECT)
            .bind(hash)
            .fetch_one(&self.0)
            .await
            .unwrap();
        let (state, stored, expire_at): (i64, String, i64) = (row.get(1), row.get(2), row.get(4));
        let (status, body, now): (Option<i64>, Option<Vec<u8>>, i64) =
            (row.get(5), row.get(7), row.get(8));
        assert!(state == 1 && stored == request && expire_at > now);
        assert!(status == Some(201) && body.is_some());
    }
}

/// The least a correct layer sends on Redis: one script per claim, one per completion, on the
/// store's connection under a prefix of its own.
#[derive(Clone)]
struct RedisMinimal {
    conn: idem::store::redis::RedisConnection,
    prefix: Arc<str>,
    claim: Arc<redis::Script>,
    complete: Arc<redis::Script>,
}

impl RedisMinimal {
    fn new(store: &RedisStore, prefix: &str) -> Self {
        RedisMinimal {
            conn: store.connection().clone(),
            prefix: format!("{prefix}minimal:").into(),
            claim: Arc::new(redis::Script::new(minimal::REDIS_CLAIM)),
            complete: Arc::new(redis::Script::new(minimal::REDIS_COMPLETE)),
        }
    }

    fn record(&self, key_hash: &[u8]) -> Vec<u8> {
        [self.prefix.as_bytes(), key_hash].concat()
    }
}

impl MinimalFloor for RedisMinimal {
    async fn claim_complete_key(&self, key_hash: &[u8], request: &str) {
        let mut conn = self.conn.clone();
        let out: Vec<redis::Value> = self
            .claim
            .key(self.record(key_hash))
            .arg(request)
            .arg(LEASE_MS)
            .arg(TTL_MS)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(out.first().map(redis_int), Some(1));
        let done: i64 = self
            .complete
            .key(self.record(key_hash))
            .arg(1)
            .arg(201)
            .arg(&minimal::NO_HEADERS[..])
            .arg(body())
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(done, 1);
    }
}

impl Replay for RedisMinimal {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let request = RequestHash::of_bytes(b"{}").to_string();
        let mut conn = self.conn.clone();
        let out: Vec<redis::Value> = self
            .claim
            .key(self.record(&key.hash()[..]))
            .arg(&request)
            .arg(LEASE_MS)
            .arg(TTL_MS)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        // `{0, now, request_hash, state, lease_until, expire_at, resp_status, headers, body}`
        assert_eq!(redis_int(&out[0]), 0);
        assert_eq!(redis_bytes(&out[2]), Some(request.as_bytes()));
        assert_eq!(redis_int(&out[3]), 1);
        assert!(redis_int(&out[5]) > redis_int(&out[1]));
        assert_eq!(redis_int(&out[6]), 201);
        assert!(redis_bytes(&out[8]).is_some());
    }
}

/// idem's `claim + complete` and replays of `keys` against the minimal layer's, two rows.
async fn against_minimal<S, B>(
    backend: &str,
    label: &str,
    n: usize,
    store: &S,
    keys: &Arc<Vec<String>>,
    min: &B,
) where
    S: Store + Clone,
    B: Baseline,
{
    let cc = format!("{label}-min-cc");
    let cc = cc.as_str();
    let idem = |_: usize| {
        let store = store.clone();
        async move { idem_claim_complete(&store, &fresh(cc)).await }
    };
    let floor = |_: usize| {
        let min = min.clone();
        async move { min.claim_complete(cc).await }
    };
    let (a, b) = pair(n, idem, floor).await;
    row(
        backend,
        "claim + complete vs the minimal layer's statements",
        a,
        Some(b),
    );
    let (a, b) = replays(n, store, keys, Some(min)).await;
    row(backend, "replay vs the minimal layer's statements", a, b);
}

/// What the claim form costs a PostgreSQL replay: `ON CONFLICT DO UPDATE` locks the row even when
/// it updates nothing. Reference: a plain `SELECT` of the same row (which could not claim).
#[derive(Clone)]
struct PgSelect(PgPool);

impl Replay for PgSelect {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let row = sqlx::query(
            "SELECT request_hash, state, resp_status, resp_headers, resp_body, biz_no \
             FROM idem.idempotency_records WHERE key_hash = $1",
        )
        .bind(&key.hash()[..])
        .fetch_one(&self.0)
        .await
        .unwrap();
        let status: Option<i16> = row.get(2);
        assert_eq!(status, Some(201));
    }
}

/// MariaDB's statements by hand; `causal`: the completion and the replay's read as a store on a
/// Galera node sends them.
#[derive(Clone)]
struct MySql(MySqlPool, bool);

impl Baseline for MySql {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        let done = insert!(&r.key_hash, &r.readable, &r.request_hex, &r.operation_id)
            .execute(&self.0)
            .await
            .unwrap();
        // The statement's time, handed back through `LAST_INSERT_ID(now)` (idem derives the
        // lease's deadlines from it).
        assert!(done.last_insert_id() > 0);
        let complete = if self.1 {
            idem::store::mysql::sql::complete_causal()
        } else {
            idem::store::mysql::sql::complete()
        };
        let done = sqlx::query(complete)
            .bind(1i16)
            .bind(201i16)
            .bind(vec![1u8, 0, 0, 0, 0])
            .bind(body())
            .bind(Some("PAY-1"))
            .bind(&r.key_hash)
            .bind(1i64)
            .bind(&r.operation_id)
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for MySql {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let (hash, readable) = (&key.hash()[..], key.readable());
        let request = RequestHash::of_bytes(b"{}").to_string();
        let err = insert!(hash, readable, &request, OPERATION_ID)
            .execute(&self.0)
            .await
            .unwrap_err();
        let db = err.as_database_error().unwrap();
        assert_eq!(db.code().as_deref(), Some("23000"));
        let select = if self.1 {
            idem::store::mysql::sql::select_causal()
        } else {
            idem::store::mysql::sql::select()
        };
        let row = sqlx::query(select)
            .bind(hash)
            .fetch_one(&self.0)
            .await
            .unwrap();
        assert!(replayed!(row, 0, request, i8, i16));
    }
}

#[derive(Clone)]
struct Sqlite(SqlitePool);

impl Baseline for Sqlite {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        let sql = idem::store::sqlite::sql::CLAIM;
        // `RETURNING fence, operation_id, lease_until, expire_at`
        let row = claim!(sql, r).fetch_one(&self.0).await.unwrap();
        let fence: i64 = row.get(0);
        let sql = idem::store::sqlite::sql::COMPLETE;
        let done = complete!(sql, i64, &r.key_hash, fence, &r.operation_id)
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for Sqlite {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let (hash, readable) = (&key.hash()[..], key.readable());
        let request = RequestHash::of_bytes(b"{}").to_string();
        let sql = idem::store::sqlite::sql::CLAIM;
        let claimed = claim!(sql, hash, readable, &request, OPERATION_ID)
            .fetch_optional(&self.0)
            .await
            .unwrap();
        assert!(claimed.is_none());
        let row = sqlx::query(idem::store::sqlite::sql::select())
            .bind(hash)
            .bind(SERVER_CLOCK)
            .fetch_one(&self.0)
            .await
            .unwrap();
        assert!(replayed!(row, 0, request, i64, i64));
    }
}

/// The Redis store's own scripts (`idem::store::redis::scripts`), invoked by hand on the
/// store's connection under the store's key prefix, with the key hash precomputed.
#[derive(Clone)]
struct Redis {
    conn: idem::store::redis::RedisConnection,
    prefix: Arc<str>,
    claim: Arc<redis::Script>,
    complete: Arc<redis::Script>,
}

/// The expiry margin the store passes by default (ms).
const REDIS_MARGIN_MS: i64 = 300_000;

impl Redis {
    fn new(store: &RedisStore, prefix: &str) -> Self {
        Redis {
            conn: store.connection().clone(),
            prefix: Arc::from(prefix),
            claim: Arc::new(redis::Script::new(idem::store::redis::scripts::CLAIM)),
            complete: Arc::new(redis::Script::new(idem::store::redis::scripts::COMPLETE)),
        }
    }

    /// The claim script's reply for a record of `hex` (key hash in hex).
    async fn claim(&self, hex: &str, readable: &str, request: &str) -> Vec<redis::Value> {
        let mut conn = self.conn.clone();
        self.claim
            .key(format!("{}rec:{hex}", self.prefix))
            .key(format!("{}expire_at", self.prefix))
            .key(format!("{}replay_until", self.prefix))
            .arg(readable)
            .arg(request)
            .arg(OPERATION_ID)
            .arg("")
            .arg(LEASE_MS)
            .arg(TTL_MS)
            .arg(REDIS_MARGIN_MS)
            .arg(hex)
            .arg(NOT_REMEMBERED)
            .invoke_async(&mut conn)
            .await
            .unwrap()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn redis_int(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Int(n) => *n,
        redis::Value::BulkString(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
        other => panic!("not an integer: {other:?}"),
    }
}

fn redis_bytes(v: &redis::Value) -> Option<&[u8]> {
    match v {
        redis::Value::BulkString(b) => Some(b),
        _ => None,
    }
}

impl Baseline for Redis {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        let hex = hex(&r.key_hash);
        // `{1, fence, operation id, lease_until, expire_at, took_over, now}`
        let out = self.claim(&hex, &r.readable, &r.request_hex).await;
        assert_eq!(redis_int(&out[0]), 1);
        let fence = redis_int(&out[1]);
        let mut conn = self.conn.clone();
        let done: i64 = self
            .complete
            .key(format!("{}rec:{hex}", self.prefix))
            .key(format!("{}expire_at", self.prefix))
            .arg(fence)
            .arg(&r.operation_id)
            .arg(1)
            .arg(201)
            .arg(vec![1u8, 0, 0, 0, 0])
            .arg(body())
            .arg("1")
            .arg("PAY-1")
            .arg("")
            .arg("")
            .arg(REDIS_MARGIN_MS)
            .arg(&hex)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(done, 2);
    }
}

impl Replay for Redis {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let request = RequestHash::of_bytes(b"{}").to_string();
        // `{3, now, idem_key, request_hash, state, operation_id, fence, resp_status,
        // resp_headers, resp_body, biz_no, locked_at, lease_until, expire_at, ..}`
        let out = self
            .claim(&key.hash_hex().to_string(), key.readable(), &request)
            .await;
        assert_eq!(redis_int(&out[0]), 3);
        let now = redis_int(&out[1]);
        let replayed = redis_bytes(&out[3]) == Some(request.as_bytes())
            && redis_int(&out[4]) == 1
            && redis_int(&out[7]) == 201
            && redis_bytes(&out[9]).is_some()
            && redis_int(&out[13]) > now;
        assert!(replayed);
    }
}

/// The rows of an SQL backend, named with the statements idem sends on each path (`counts`:
/// claim + complete, replay), which [`check_statements`] verifies after the run.
fn paths(counts: [u64; 2]) -> [String; 2] {
    let n = |count: u64| match count {
        1 => "1 statement".to_owned(),
        _ => format!("{count} statements"),
    };
    [
        format!("claim + complete ({})", n(counts[0])),
        format!("replay ({})", n(counts[1])),
    ]
}

/// Checks that the store sent `sent` statements in [`bench`] with `n` operations a round: the
/// statements per path its rows name (`counts`), on every operation measured and on the setup of
/// the replays' records. A completion that matched no row would add a read (its owner), a
/// contended claim another statement.
fn check_statements(backend: &str, sent: u64, n: usize, counts: [u64; 2]) {
    let ops = ((ROUNDS + 1) * n) as u64;
    let expected = ops * counts[0] + REPLAY_KEYS as u64 * counts[0] + ops * counts[1];
    assert_eq!(
        sent, expected,
        "{backend}: statements per path are not {counts:?} (claim + complete, replay)"
    );
}

async fn bench_postgres(url: &str) {
    let store = PostgresStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    let n = 200;
    let base = Postgres(store.pool().clone());
    let (counts, sent) = ([2, 1], store.statement_count());
    let [cc, rp] = paths(counts);
    let keys = bench("PostgreSQL", [&cc, &rp], "pg", n, &store, Some(&base)).await;
    check_statements("PostgreSQL", store.statement_count() - sent, n, counts);
    let select = PgSelect(store.pool().clone());
    let (idem, base) = replays(n, &store, &keys, Some(&select)).await;
    let path = "replay vs a plain `SELECT` of the row (not a claim)";
    row("PostgreSQL", path, idem, base);
    let min = PgMinimal(store.pool().clone());
    min.seed(&keys).await;
    against_minimal("PostgreSQL", "pg", n, &store, &keys, &min).await;
    remember_cost("PostgreSQL", "pg", n, &store).await;
}

async fn bench_mysql(url: &str) {
    let store = MySqlStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    let n = 200;
    let base = MySql(store.pool().clone(), false);
    let (counts, sent) = ([2, 2], store.statement_count());
    let [cc, rp] = paths(counts);
    let keys = bench("MariaDB", [&cc, &rp], "my", n, &store, Some(&base)).await;
    check_statements("MariaDB", store.statement_count() - sent, n, counts);
    let min = MyMinimal(store.pool().clone());
    min.seed(&keys).await;
    against_minimal("MariaDB", "my", n, &store, &keys, &min).await;
    remember_cost("MariaDB", "my", n, &store).await;
}

/// The rows of the Galera table: idem on a node against the same statements by hand there,
/// against idem on one MariaDB server, and with causal reads against without.
static GALERA_ROWS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn galera_row(path: &str, against: &str, a: f64, b: f64) {
    GALERA_ROWS.lock().unwrap().push(format!(
        "| {path} | {against} | {a:.1} | {b:.1} | {:.3}x |",
        a / b
    ));
}

/// idem on node 1 of a 3-node Galera cluster (`urls`, as `IDEM_TEST_GALERA_URLS`): against its
/// statements by hand on the same node, against idem on the single server `single` (when
/// given), and its causal reads (`wsrep_sync_wait`) against plain reads.
async fn bench_galera(urls: &str, single: Option<&str>) {
    let url = urls.split(',').next().unwrap();
    let store = MySqlStore::connect(url).await.unwrap();
    assert!(store.is_galera());
    store.migrate().await.unwrap();
    let n = 200;
    let base = MySql(store.pool().clone(), true);
    let cc = |store: MySqlStore, label: &'static str| {
        move |_: usize| {
            let store = store.clone();
            async move { idem_claim_complete(&store, &fresh(label)).await }
        }
    };
    let (idem, hand) = against(
        n,
        cc(store.clone(), "gl-cc"),
        Some(|_: usize| {
            let base = base.clone();
            async move { base.claim_complete("gl-cc-raw").await }
        }),
    )
    .await;
    galera_row(
        "claim + complete",
        "the same statements by hand",
        idem,
        hand.unwrap(),
    );
    let keys = Arc::new(completed(&store, "gl-rp", REPLAY_KEYS).await);
    let (idem, hand) = replays(n, &store, &keys, Some(&base)).await;
    galera_row("replay", "the same statements by hand", idem, hand.unwrap());

    let plain = store.clone().with_galera(false);
    let (a, b) = pair(n, cc(store.clone(), "gl-cw"), cc(plain.clone(), "gl-cp")).await;
    galera_row("claim + complete", "without causal reads", a, b);
    let (a, b) = replays(n, &store, &keys, Some(&StoreReplay(plain))).await;
    galera_row("replay", "without causal reads", a, b.unwrap());

    let Some(single) = single else { return };
    let one = MySqlStore::connect(single).await.unwrap();
    one.migrate().await.unwrap();
    let (a, b) = pair(n, cc(store.clone(), "gl-cs"), cc(one.clone(), "my-cs")).await;
    galera_row("claim + complete", "idem on one MariaDB server", a, b);
    let one_keys = Arc::new(completed(&one, "my-rs", REPLAY_KEYS).await);
    let (a, b) = pair(
        n,
        |i: usize| {
            let (store, keys) = (store.clone(), keys.clone());
            async move { idem_replay(&store, &keys[i % keys.len()]).await }
        },
        |i: usize| {
            let (one, keys) = (one.clone(), one_keys.clone());
            async move { idem_replay(&one, &keys[i % keys.len()]).await }
        },
    )
    .await;
    galera_row("replay", "idem on one MariaDB server", a, b);
}

/// A replay through an idem store, as the other side of [`replays`].
#[derive(Clone)]
struct StoreReplay(MySqlStore);

impl Replay for StoreReplay {
    async fn replay(&self, client: &str) {
        idem_replay(&self.0, client).await;
    }
}

async fn bench_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let n = 500;
    let base = Sqlite(store.pool().clone());
    let (counts, sent) = ([2, 2], store.statement_count());
    let [cc, rp] = paths(counts);
    let keys = bench("SQLite", [&cc, &rp], "sq", n, &store, Some(&base)).await;
    check_statements("SQLite", store.statement_count() - sent, n, counts);
    let min = SqliteMinimal(store.pool().clone());
    min.seed(&keys).await;
    against_minimal("SQLite", "sq", n, &store, &keys, &min).await;
    remember_cost("SQLite", "sq", n, &store).await;
}

async fn bench_redis(url: &str) {
    let prefix = format!("idem-bench:{}:", fresh("run"));
    let store = RedisStore::connect(url).await.unwrap().with_prefix(&prefix);
    store.migrate().await.unwrap();
    let n = 500;
    let base = Redis::new(&store, &prefix);
    let (counts, sent) = ([2, 1], store.command_count());
    let [cc, rp] = paths(counts);
    let [cc, rp] = [cc, rp].map(|p| p.replace("statement", "script call"));
    let keys = bench("Redis", [&cc, &rp], "rd", n, &store, Some(&base)).await;
    check_statements("Redis", store.command_count() - sent, n, counts);
    let min = RedisMinimal::new(&store, &prefix);
    min.seed(&keys).await;
    against_minimal("Redis", "rd", n, &store, &keys, &min).await;
    remember_cost("Redis", "rd", n, &store).await;
}

async fn bench_memory() {
    let store = MemoryStore::new();
    let paths = ["claim + complete", "replay"];
    bench("memory", paths, "mem", 20_000, &store, None::<&Infallible>).await;
    remember_cost("memory", "mem", 20_000, &store).await;
}

/// How long the records of [`remember_cost`] are remembered: a year.
const REMEMBER: Duration = Duration::from_secs(365 * 86_400);

/// The rows of the second table: what `remember` costs each store's `claim + complete`.
static REMEMBER_ROWS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// `claim + complete` through `store` with `remember = 1y` against the same without, paired:
/// the cost of the setting (the claim writes `replay_until`, and the remembered record enters
/// the index of responses the purge frees).
async fn remember_cost<S: Store + Clone>(backend: &str, label: &str, n: usize, store: &S) {
    let (with, without) = (format!("{label}-rm"), format!("{label}-nr"));
    let (with, without) = (with.as_str(), without.as_str());
    let remembering = |_: usize| {
        let store = store.clone();
        async move { idem_claim_complete_remembering(&store, &fresh(with), Some(REMEMBER)).await }
    };
    let plain = |_: usize| {
        let store = store.clone();
        async move { idem_claim_complete_remembering(&store, &fresh(without), None).await }
    };
    let (a, b) = pair(n, remembering, plain).await;
    REMEMBER_ROWS.lock().unwrap().push(format!(
        "| {backend} | claim + complete | {a:.1} | {b:.1} | {:.3}x |",
        a / b
    ));
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this with no flag: stay quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "store benchmark: run `scripts/bench` (or `cargo bench --bench store --all-features`)"
        );
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("| backend | path | idem µs/op | hand-written sqlx µs/op | ratio |");
        println!("|---|---|---|---|---|");
        bench_sqlite().await;
        match std::env::var("IDEM_TEST_POSTGRES_URL") {
            Ok(url) => bench_postgres(&url).await,
            Err(_) => eprintln!("note: IDEM_TEST_POSTGRES_URL unset, PostgreSQL skipped"),
        }
        match std::env::var("IDEM_TEST_MYSQL_URL") {
            Ok(url) => bench_mysql(&url).await,
            Err(_) => eprintln!("note: IDEM_TEST_MYSQL_URL unset, MariaDB skipped"),
        }
        match std::env::var("IDEM_TEST_REDIS_URL") {
            Ok(url) => bench_redis(&url).await,
            Err(_) => eprintln!("note: IDEM_TEST_REDIS_URL unset, Redis skipped"),
        }
        match std::env::var("IDEM_TEST_GALERA_URLS") {
            Ok(urls) => {
                let single = std::env::var("IDEM_TEST_MYSQL_URL").ok();
                bench_galera(&urls, single.as_deref()).await;
            }
            Err(_) => eprintln!("note: IDEM_TEST_GALERA_URLS unset, MariaDB Galera skipped"),
        }
        bench_memory().await;
        println!();
        println!("| backend | path | with `remember` µs/op | without µs/op | ratio |");
        println!("|---|---|---|---|---|");
        for row in REMEMBER_ROWS.lock().unwrap().iter() {
            println!("{row}");
        }
        let galera = GALERA_ROWS.lock().unwrap();
        if !galera.is_empty() {
            println!();
            println!(
                "| MariaDB Galera, node 1 of 3 | against | idem µs/op | other µs/op | ratio |"
            );
            println!("|---|---|---|---|---|");
            for row in galera.iter() {
                println!("{row}");
            }
        }
    });
}
