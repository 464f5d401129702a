//! Store overhead: `claim + complete` and `replay` through idem's stores, each against the very
//! same SQL statements hand-written with sqlx, in the same run, against the same database.
//!
//! Run with `scripts/bench` (starts throwaway PostgreSQL and MariaDB servers, like
//! `scripts/test`); a backend whose URL (`IDEM_TEST_POSTGRES_URL`, `IDEM_TEST_MYSQL_URL`) is unset
//! is skipped. idem and the baseline alternate operation by operation so that drift on a shared
//! machine hits both alike; the table reports medians over the rounds. Not criterion:
//! what matters here is the ratio of two interleaved measurements, printed as a Markdown table.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::RequestHash;
use idem::store::{
    Claim, ClaimRequest, Completion, MemoryStore, MySqlStore, Outcome, PostgresStore, ScopedKey,
    SqliteStore, Store,
};
use sha2::{Digest, Sha256};
use sqlx::{MySqlPool, PgPool, Row, SqlitePool};

const ROUNDS: usize = 15;
const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);

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

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
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
    ScopedKey::new("t", "u", "POST /payments", client).unwrap()
}

async fn idem_claim_complete(store: &dyn Store, client: &str) {
    let key = key(client);
    let req = ClaimRequest::new(&key, RequestHash::of_bytes(b"{}"), LEASE, TTL);
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
                if a_first == (op % 2 == 0) {
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

    let keys = Arc::new(completed(store, &format!("{label}-rp"), 50).await);
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

/// Binds a claim's parameters: the first seven of every backend's claim statement, in the same
/// order (MariaDB's `INSERT` takes two more). `claim!(sql, r, now)` binds those of a [`Raw`] `r`.
macro_rules! claim {
    ($sql:expr, $r:ident, $now:expr) => {
        claim!(
            $sql,
            &$r.key_hash,
            &$r.readable,
            &$r.request_hex,
            &$r.operation_id,
            $now
        )
    };
    ($sql:expr, $hash:expr, $readable:expr, $request:expr, $operation_id:expr, $now:expr) => {
        sqlx::query($sql)
            .bind($hash)
            .bind($readable)
            .bind($request)
            .bind($operation_id)
            .bind($now)
            .bind($now + 30_000)
            .bind($now + 3_600_000)
    };
}

/// Binds PostgreSQL's and SQLite's `COMPLETE` (same parameters; outcome and status are `$int`):
/// a `Completed` 201 with the snapshot idem stores for [`body`].
macro_rules! complete {
    ($sql:expr, $int:ty, $hash:expr, $fence:expr, $now:expr, $operation_id:expr) => {
        sqlx::query($sql)
            .bind($hash)
            .bind($fence)
            .bind::<$int>(1)
            .bind::<$int>(201)
            .bind(vec![1u8, 0, 0, 0, 0])
            .bind(body())
            .bind(Some("PAY-1"))
            .bind(None::<i64>)
            .bind($now)
            .bind($operation_id)
    };
}

/// Decodes what a replay needs from a record `$row` whose stored request hash is column
/// `$first`: the hash (422 check), state and snapshot, as the backend's types. True when the
/// snapshot is the completed 201.
macro_rules! replayed {
    ($row:expr, $first:expr, $state:ty, $status:ty) => {{
        let row = &$row;
        let _hash: String = row.get($first);
        let _state: $state = row.get($first + 1);
        let status: Option<$status> = row.get($first + 5);
        let _headers: Option<Vec<u8>> = row.get($first + 6);
        let body: Option<Vec<u8>> = row.get($first + 7);
        let _biz_no: Option<String> = row.get($first + 8);
        status == Some(201) && body.is_some()
    }};
}

#[derive(Clone)]
struct Postgres(PgPool);

impl Baseline for Postgres {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        let now = now_ms();
        let sql = idem::store::postgres::sql::claim();
        let row = claim!(sql, r, now).fetch_one(&self.0).await.unwrap();
        let claimed: bool = row.get(0);
        let fence: i64 = row.get(5);
        assert!(claimed);
        let sql = idem::store::postgres::sql::COMPLETE;
        let done = complete!(sql, i16, &r.key_hash, fence, now, &r.operation_id)
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for Postgres {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let now = now_ms();
        let (hash, readable) = (&key.hash()[..], key.readable());
        let request = RequestHash::of_bytes(b"{}").to_string();
        let sql = idem::store::postgres::sql::claim();
        let row = claim!(sql, hash, readable, request, OPERATION_ID, now)
            .fetch_one(&self.0)
            .await
            .unwrap();
        let claimed: bool = row.get(0);
        let replayed = replayed!(row, 2, i16, i16);
        assert!(!claimed && replayed);
    }
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

#[derive(Clone)]
struct MySql(MySqlPool);

impl Baseline for MySql {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        let now = now_ms();
        let sql = idem::store::mysql::sql::INSERT;
        claim!(sql, r, now)
            .bind(now)
            .bind(now)
            .execute(&self.0)
            .await
            .unwrap();
        let done = sqlx::query(idem::store::mysql::sql::COMPLETE)
            .bind(1i16)
            .bind(201i16)
            .bind(vec![1u8, 0, 0, 0, 0])
            .bind(body())
            .bind(Some("PAY-1"))
            .bind(None::<i64>)
            .bind(now)
            .bind(now)
            .bind(&r.key_hash)
            .bind(1i64)
            .bind(now)
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
        let now = now_ms();
        let (hash, readable) = (&key.hash()[..], key.readable());
        let request = RequestHash::of_bytes(b"{}").to_string();
        let sql = idem::store::mysql::sql::INSERT;
        let err = claim!(sql, hash, readable, request, OPERATION_ID, now)
            .bind(now)
            .bind(now)
            .execute(&self.0)
            .await
            .unwrap_err();
        let db = err.as_database_error().unwrap();
        assert_eq!(db.code().as_deref(), Some("23000"));
        let row = sqlx::query(idem::store::mysql::sql::select())
            .bind(hash)
            .fetch_one(&self.0)
            .await
            .unwrap();
        assert!(replayed!(row, 1, i8, i16));
    }
}

#[derive(Clone)]
struct Sqlite(SqlitePool);

impl Baseline for Sqlite {
    async fn claim_complete(&self, label: &str) {
        let r = raw(&fresh(label));
        let now = now_ms();
        let sql = idem::store::sqlite::sql::CLAIM;
        let row = claim!(sql, r, now).fetch_one(&self.0).await.unwrap();
        let fence: i64 = row.get(0);
        let sql = idem::store::sqlite::sql::COMPLETE;
        let done = complete!(sql, i64, &r.key_hash, fence, now, &r.operation_id)
            .execute(&self.0)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

impl Replay for Sqlite {
    async fn replay(&self, client: &str) {
        let key = key(client);
        let now = now_ms();
        let (hash, readable) = (&key.hash()[..], key.readable());
        let request = RequestHash::of_bytes(b"{}").to_string();
        let sql = idem::store::sqlite::sql::CLAIM;
        let claimed = claim!(sql, hash, readable, request, OPERATION_ID, now)
            .fetch_optional(&self.0)
            .await
            .unwrap();
        assert!(claimed.is_none());
        let row = sqlx::query(idem::store::sqlite::sql::select())
            .bind(hash)
            .fetch_one(&self.0)
            .await
            .unwrap();
        assert!(replayed!(row, 1, i64, i64));
    }
}

/// The rows of a backend with a hand-written baseline: how many statements each path takes.
const CC: &str = "claim + complete (2 statements)";
/// A replay where the claim does not return the row (SQLite, MariaDB): claim, then select.
const RP2: &str = "replay (2 statements)";

async fn bench_postgres(url: &str) {
    let store = PostgresStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    let n = 200;
    let base = Postgres(store.pool().clone());
    let paths = [CC, "replay (1 statement)"];
    let keys = bench("PostgreSQL", paths, "pg", n, &store, Some(&base)).await;
    let select = PgSelect(store.pool().clone());
    let (idem, base) = replays(n, &store, &keys, Some(&select)).await;
    let path = "replay vs a plain `SELECT` of the row (not a claim)";
    row("PostgreSQL", path, idem, base);
}

async fn bench_mysql(url: &str) {
    let store = MySqlStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    let base = MySql(store.pool().clone());
    bench("MariaDB", [CC, RP2], "my", 200, &store, Some(&base)).await;
}

async fn bench_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let base = Sqlite(store.pool().clone());
    bench("SQLite", [CC, RP2], "sq", 500, &store, Some(&base)).await;
}

async fn bench_memory() {
    let store = MemoryStore::new();
    let paths = ["claim + complete", "replay"];
    bench("memory", paths, "mem", 20_000, &store, None::<&Infallible>).await;
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
        bench_memory().await;
    });
}
