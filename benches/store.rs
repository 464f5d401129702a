//! Store overhead: `claim + complete` and `replay` through idem's stores, each against the very
//! same SQL statements hand-written with sqlx, in the same run, against the same database.
//!
//! Run with `scripts/bench` (starts throwaway PostgreSQL and MariaDB servers, like
//! `scripts/test`); a backend whose URL (`IDEM_TEST_POSTGRES_URL`, `IDEM_TEST_MYSQL_URL`) is unset
//! is skipped. idem and the baseline alternate operation by operation so that drift on a shared
//! machine hits both alike; the table reports medians over the rounds. Not criterion:
//! what matters here is the ratio of two interleaved measurements, printed as a Markdown table.

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
use sqlx::Row;

const ROUNDS: usize = 15;
const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);

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
        operation_id: "00000000-0000-4000-8000-000000000000".to_owned(),
    }
}

async fn idem_claim_complete(store: &dyn Store, client: &str) {
    let key = ScopedKey::new("t", "u", "POST /payments", client).unwrap();
    let req = ClaimRequest::new(&key, RequestHash::of_bytes(b"{}"), LEASE, TTL);
    let Claim::Acquired(lease) = store.claim(&req).await.unwrap() else {
        panic!("not acquired")
    };
    let done = Completion::new(Outcome::Completed, 201, body()).with_biz_no("PAY-1");
    store.complete(&lease, &done).await.unwrap();
}

async fn idem_replay(store: &dyn Store, client: &str) {
    let key = ScopedKey::new("t", "u", "POST /payments", client).unwrap();
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

async fn bench_postgres(url: &str) {
    let store = PostgresStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    let pool = store.pool().clone();
    let n = 200;
    let (idem, base) = pair(
        n,
        |_| {
            let store = store.clone();
            async move { idem_claim_complete(&store, &fresh("pg-cc")).await }
        },
        |_| {
            let pool = pool.clone();
            async move {
                let r = raw(&fresh("pg-cc-raw"));
                let now = now_ms();
                let row = sqlx::query(idem::store::postgres::sql::claim())
                    .bind(&r.key_hash)
                    .bind(&r.readable)
                    .bind(&r.request_hex)
                    .bind(&r.operation_id)
                    .bind(now)
                    .bind(now + 30_000)
                    .bind(now + 3_600_000)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                let claimed: bool = row.get(0);
                let fence: i64 = row.get(5);
                assert!(claimed);
                let done = sqlx::query(idem::store::postgres::sql::COMPLETE)
                    .bind(&r.key_hash)
                    .bind(fence)
                    .bind(1i16)
                    .bind(201i16)
                    .bind(vec![1u8, 0, 0, 0, 0])
                    .bind(body())
                    .bind(Some("PAY-1"))
                    .bind(None::<i64>)
                    .bind(now)
                    .bind(&r.operation_id)
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        },
    )
    .await;
    row(
        "PostgreSQL",
        "claim + complete (2 statements)",
        idem,
        Some(base),
    );

    let keys = Arc::new(completed(&store, "pg-rp", 50).await);
    let (idem, base) = pair(
        n,
        |i| {
            let (store, keys) = (store.clone(), keys.clone());
            async move { idem_replay(&store, &keys[i % keys.len()]).await }
        },
        |i| {
            let (pool, keys) = (pool.clone(), keys.clone());
            async move {
                let key =
                    ScopedKey::new("t", "u", "POST /payments", &keys[i % keys.len()]).unwrap();
                let now = now_ms();
                let row = sqlx::query(idem::store::postgres::sql::claim())
                    .bind(&key.hash()[..])
                    .bind(key.readable())
                    .bind(RequestHash::of_bytes(b"{}").to_string())
                    .bind("00000000-0000-4000-8000-000000000000")
                    .bind(now)
                    .bind(now + 30_000)
                    .bind(now + 3_600_000)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                let claimed: bool = row.get(0);
                // What a replay needs: the stored hash (422 check), state and snapshot.
                let _hash: String = row.get(2);
                let _state: i16 = row.get(3);
                let status: Option<i16> = row.get(7);
                let _headers: Option<Vec<u8>> = row.get(8);
                let body: Option<Vec<u8>> = row.get(9);
                let _biz_no: Option<String> = row.get(10);
                assert!(!claimed && status == Some(201) && body.is_some());
            }
        },
    )
    .await;
    row("PostgreSQL", "replay (1 statement)", idem, Some(base));

    // What the claim form costs a replay: `ON CONFLICT DO UPDATE` locks the row even when it
    // updates nothing. Reference: a plain `SELECT` of the same row (which could not claim).
    let (idem, base) = pair(
        n,
        |i| {
            let (store, keys) = (store.clone(), keys.clone());
            async move { idem_replay(&store, &keys[i % keys.len()]).await }
        },
        |i| {
            let (pool, keys) = (pool.clone(), keys.clone());
            async move {
                let key =
                    ScopedKey::new("t", "u", "POST /payments", &keys[i % keys.len()]).unwrap();
                let row = sqlx::query(
                    "SELECT request_hash, state, resp_status, resp_headers, resp_body, biz_no \
                     FROM idem.idempotency_records WHERE key_hash = $1",
                )
                .bind(&key.hash()[..])
                .fetch_one(&pool)
                .await
                .unwrap();
                let status: Option<i16> = row.get(2);
                assert_eq!(status, Some(201));
            }
        },
    )
    .await;
    row(
        "PostgreSQL",
        "replay vs a plain `SELECT` of the row (not a claim)",
        idem,
        Some(base),
    );
}

async fn bench_mysql(url: &str) {
    let store = MySqlStore::connect(url).await.unwrap();
    store.migrate().await.unwrap();
    let pool = store.pool().clone();
    let n = 200;
    let (idem, base) = pair(
        n,
        |_| {
            let store = store.clone();
            async move { idem_claim_complete(&store, &fresh("my-cc")).await }
        },
        |_| {
            let pool = pool.clone();
            async move {
                let r = raw(&fresh("my-cc-raw"));
                let now = now_ms();
                sqlx::query(idem::store::mysql::sql::INSERT)
                    .bind(&r.key_hash)
                    .bind(&r.readable)
                    .bind(&r.request_hex)
                    .bind(&r.operation_id)
                    .bind(now)
                    .bind(now + 30_000)
                    .bind(now + 3_600_000)
                    .bind(now)
                    .bind(now)
                    .execute(&pool)
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
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        },
    )
    .await;
    row(
        "MariaDB",
        "claim + complete (2 statements)",
        idem,
        Some(base),
    );

    let keys = Arc::new(completed(&store, "my-rp", 50).await);
    let (idem, base) = pair(
        n,
        |i| {
            let (store, keys) = (store.clone(), keys.clone());
            async move { idem_replay(&store, &keys[i % keys.len()]).await }
        },
        |i| {
            let (pool, keys) = (pool.clone(), keys.clone());
            async move {
                let key =
                    ScopedKey::new("t", "u", "POST /payments", &keys[i % keys.len()]).unwrap();
                let now = now_ms();
                let err = sqlx::query(idem::store::mysql::sql::INSERT)
                    .bind(&key.hash()[..])
                    .bind(key.readable())
                    .bind(RequestHash::of_bytes(b"{}").to_string())
                    .bind("00000000-0000-4000-8000-000000000000")
                    .bind(now)
                    .bind(now + 30_000)
                    .bind(now + 3_600_000)
                    .bind(now)
                    .bind(now)
                    .execute(&pool)
                    .await
                    .unwrap_err();
                let db = err.as_database_error().unwrap();
                assert_eq!(db.code().as_deref(), Some("23000"));
                let row = sqlx::query(idem::store::mysql::sql::select())
                    .bind(&key.hash()[..])
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                // What a replay needs: the stored hash (422 check), state and snapshot.
                let _hash: String = row.get(1);
                let _state: i8 = row.get(2);
                let status: Option<i16> = row.get(6);
                let _headers: Option<Vec<u8>> = row.get(7);
                let body: Option<Vec<u8>> = row.get(8);
                let _biz_no: Option<String> = row.get(9);
                assert!(status == Some(201) && body.is_some());
            }
        },
    )
    .await;
    row("MariaDB", "replay (2 statements)", idem, Some(base));
}

async fn bench_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let pool = store.pool().clone();
    let n = 500;
    let (idem, base) = pair(
        n,
        |_| {
            let store = store.clone();
            async move { idem_claim_complete(&store, &fresh("sq-cc")).await }
        },
        |_| {
            let pool = pool.clone();
            async move {
                let r = raw(&fresh("sq-cc-raw"));
                let now = now_ms();
                let row = sqlx::query(idem::store::sqlite::sql::CLAIM)
                    .bind(&r.key_hash)
                    .bind(&r.readable)
                    .bind(&r.request_hex)
                    .bind(&r.operation_id)
                    .bind(now)
                    .bind(now + 30_000)
                    .bind(now + 3_600_000)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                let fence: i64 = row.get(0);
                let done = sqlx::query(idem::store::sqlite::sql::COMPLETE)
                    .bind(&r.key_hash)
                    .bind(fence)
                    .bind(1i64)
                    .bind(201i64)
                    .bind(vec![1u8, 0, 0, 0, 0])
                    .bind(body())
                    .bind(Some("PAY-1"))
                    .bind(None::<i64>)
                    .bind(now)
                    .bind(&r.operation_id)
                    .execute(&pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
        },
    )
    .await;
    row(
        "SQLite",
        "claim + complete (2 statements)",
        idem,
        Some(base),
    );

    let keys = Arc::new(completed(&store, "sq-rp", 50).await);
    let (idem, base) = pair(
        n,
        |i| {
            let (store, keys) = (store.clone(), keys.clone());
            async move { idem_replay(&store, &keys[i % keys.len()]).await }
        },
        |i| {
            let (pool, keys) = (pool.clone(), keys.clone());
            async move {
                let key =
                    ScopedKey::new("t", "u", "POST /payments", &keys[i % keys.len()]).unwrap();
                let now = now_ms();
                let claimed = sqlx::query(idem::store::sqlite::sql::CLAIM)
                    .bind(&key.hash()[..])
                    .bind(key.readable())
                    .bind(RequestHash::of_bytes(b"{}").to_string())
                    .bind("00000000-0000-4000-8000-000000000000")
                    .bind(now)
                    .bind(now + 30_000)
                    .bind(now + 3_600_000)
                    .fetch_optional(&pool)
                    .await
                    .unwrap();
                assert!(claimed.is_none());
                let row = sqlx::query(idem::store::sqlite::sql::select())
                    .bind(&key.hash()[..])
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                // What a replay needs: the stored hash (422 check), state and snapshot.
                let _hash: String = row.get(1);
                let _state: i64 = row.get(2);
                let status: Option<i64> = row.get(6);
                let _headers: Option<Vec<u8>> = row.get(7);
                let body: Option<Vec<u8>> = row.get(8);
                let _biz_no: Option<String> = row.get(9);
                assert!(status == Some(201) && body.is_some());
            }
        },
    )
    .await;
    row("SQLite", "replay (2 statements)", idem, Some(base));
}

async fn bench_memory() {
    let store = MemoryStore::new();
    let n = 20_000;
    let (cc, _) = pair(
        n,
        |_| {
            let store = store.clone();
            async move { idem_claim_complete(&store, &fresh("mem-cc")).await }
        },
        |_| async {},
    )
    .await;
    row("memory", "claim + complete", cc, None);
    let keys = Arc::new(completed(&store, "mem-rp", 50).await);
    let (rp, _) = pair(
        n,
        |i| {
            let (store, keys) = (store.clone(), keys.clone());
            async move { idem_replay(&store, &keys[i % keys.len()]).await }
        },
        |_| async {},
    )
    .await;
    row("memory", "replay", rp, None);
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
