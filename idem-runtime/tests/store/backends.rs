//! Backend-specific tests: statement counts, completion inside the caller's transaction,
//! migration history, corrupt rows, two processes on one SQLite file.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::key::ScopedKey;
use idem_runtime::store::mysql::MySqlStore;
use idem_runtime::store::postgres::PostgresStore;
use idem_runtime::store::sqlite::SqliteStore;
use idem_runtime::store::{
    Claim, ClaimRequest, Clock, Completion, Lease, ManualClock, Outcome, RecordState, Store,
    StoreError, SystemClock,
};

use crate::support::*;

fn done() -> Completion {
    Completion::new(Outcome::Completed, 200, b"ok".to_vec()).with_biz_no("B-1")
}

async fn acquire(store: &dyn Store, req: &ClaimRequest<'_>) -> Lease {
    match store.claim(req).await.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// Statements per path, as documented in each backend's module docs and `docs/storage.md`:
/// `[fresh, replay, in_progress, takeover, expired, complete, release, extend]`.
async fn statement_counts(
    store: &dyn Store,
    clock: &ManualClock,
    count: &dyn Fn() -> u64,
) -> [u64; 8] {
    let mut out = [0; 8];
    let mut measure = |i: usize, before: u64| out[i] = count() - before;
    let short = Duration::from_secs(5);
    let key = unique_key("count");
    let req = ClaimRequest::new(&key, hash("a"), short, TTL);

    let b = count();
    let lease = acquire(store, &req).await;
    measure(0, b);
    let b = count();
    assert!(matches!(
        store.claim(&req).await.unwrap(),
        Claim::InProgress { .. }
    ));
    measure(2, b);
    clock.advance(Duration::from_secs(6));
    let b = count();
    let lease2 = acquire(store, &req).await;
    assert!(lease2.took_over);
    measure(3, b);
    let b = count();
    store.extend(&lease2, short).await.unwrap();
    measure(7, b);
    let b = count();
    store.complete(&lease2, &done()).await.unwrap();
    measure(5, b);
    let b = count();
    assert!(matches!(
        store.claim(&req).await.unwrap(),
        Claim::Completed(_)
    ));
    measure(1, b);
    clock.advance(TTL);
    let b = count();
    let lease3 = acquire(store, &req).await;
    assert!(!lease3.took_over);
    measure(4, b);
    let b = count();
    store.release(&lease3).await.unwrap();
    measure(6, b);
    drop(lease);
    out
}

#[tokio::test]
async fn sqlite_statement_counts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::starting_now());
    let store = sqlite_store(&dir.path().join("c.db"))
        .await
        .with_clock(clock.clone());
    let counts = statement_counts(&store, &clock, &|| store.statement_count()).await;
    assert_eq!(counts, [1, 2, 2, 1, 1, 1, 1, 1]);
}

#[tokio::test]
async fn postgres_statement_counts() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let store = store.with_clock(clock.clone());
    let counts = statement_counts(&store, &clock, &|| store.statement_count()).await;
    assert_eq!(counts, [1, 1, 1, 2, 2, 1, 1, 1]);
}

#[tokio::test]
async fn mysql_statement_counts() {
    let Some(store) = mysql_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let store = store.with_clock(clock.clone());
    let counts = statement_counts(&store, &clock, &|| store.statement_count()).await;
    assert_eq!(counts, [1, 2, 2, 3, 3, 1, 1, 1]);
}

/// With `with_one_round_trip_replays` the claim returns the row it found (`ON DUPLICATE KEY
/// UPDATE .. RETURNING`): a replay, an in-progress key, a takeover and a replaced record each
/// save the `SELECT`.
#[tokio::test]
async fn mysql_returning_statement_counts() {
    let Some(store) = mysql_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let store = store
        .with_one_round_trip_replays()
        .with_clock(clock.clone());
    let counts = statement_counts(&store, &clock, &|| store.statement_count()).await;
    assert_eq!(counts, [1, 1, 1, 2, 2, 1, 1, 1]);
}

#[tokio::test]
async fn redis_statement_counts() {
    let Some(store) = redis_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let store = store.with_clock(clock.clone());
    let counts = statement_counts(&store, &clock, &|| store.command_count()).await;
    // One script per path, takeovers and replaced records included.
    assert_eq!(counts, [1, 1, 1, 1, 1, 1, 1, 1]);
}

/// A Redis record that does not decode is `Corrupt`, named by its readable key, never replayed.
#[tokio::test]
async fn redis_corrupt_record_is_reported() {
    let Some(store) = redis_store().await else {
        return;
    };
    let key = unique_key("corrupt");
    let lease = acquire(&store, &req(&key, hash("a"))).await;
    store.complete(&lease, &done()).await.unwrap();
    let record = redis_record_key(&store, &key).await;
    let mut conn = store.connection().clone();
    let () = redis::cmd("HSET")
        .arg(&record)
        .arg("resp_headers")
        .arg(&[2u8][..])
        .query_async(&mut conn)
        .await
        .unwrap();
    match store.claim(&req(&key, hash("a"))).await {
        Err(StoreError::Corrupt { key_hash, detail }) => {
            assert_eq!(key_hash, Some(key.hash_hex().to_string()));
            assert!(detail.contains("headers"), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let () = redis::cmd("HDEL")
        .arg(&record)
        .arg("fence")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&req(&key, hash("a"))).await,
        Err(StoreError::Corrupt { .. })
    ));
}

/// A Redis hash left with a response but none of a record's own fields (edited or restored by
/// hand) is a free key, and the record claimed there keeps nothing of that response: its
/// completion without a business number stores none, and answers with its own body.
#[tokio::test]
async fn redis_stray_fields_do_not_join_a_new_record() {
    let Some(store) = redis_store().await else {
        return;
    };
    let key = unique_key("stray");
    let lease = acquire(&store, &req(&key, hash("a"))).await;
    store.complete(&lease, &done()).await.unwrap();
    let record = redis_record_key(&store, &key).await;
    let mut conn = store.connection().clone();
    let () = redis::cmd("HDEL")
        .arg(&record)
        .arg(
            &[
                "state",
                "fence",
                "operation_id",
                "expire_at",
                "request_hash",
                "rev",
            ][..],
        )
        .query_async(&mut conn)
        .await
        .unwrap();
    let lease = acquire(&store, &req(&key, hash("b"))).await;
    assert_eq!(lease.fence, 1);
    store
        .complete(
            &lease,
            &Completion::new(Outcome::Completed, 201, b"new".to_vec()),
        )
        .await
        .unwrap();
    let stored = store.get(&key).await.unwrap().expect("the new record");
    assert_eq!(
        (stored.status, &stored.body[..], stored.biz_no.as_deref()),
        (Some(201), &b"new"[..], None)
    );
}

/// The Redis key of `key`'s record, found by its key hash among the store's keys.
async fn redis_record_key(
    store: &idem_runtime::store::redis::RedisStore,
    key: &ScopedKey,
) -> String {
    let mut conn = store.connection().clone();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*rec:{}", key.hash_hex()))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    keys.into_iter().next().unwrap()
}

/// Redis deletes a record by itself `expire_at` + the margin after the claim (the key's Redis
/// expiry follows every write); the purge drops the index entry of a record Redis already
/// deleted without counting it, and the key is free again.
#[tokio::test]
async fn redis_expiry_follows_expire_at() {
    let Some(store) = redis_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let margin = Duration::from_secs(120);
    let store = store.with_clock(clock.clone()).with_expiry_margin(margin);
    let mut conn = store.connection().clone();
    let pttl = |record: String| {
        let mut conn = conn.clone();
        async move {
            let ms: i64 = redis::cmd("PTTL")
                .arg(record)
                .query_async(&mut conn)
                .await
                .unwrap();
            Duration::from_millis(ms as u64)
        }
    };
    let ttl = Duration::from_secs(60);
    let key = unique_key("redis-expiry");
    let lease = acquire(&store, &ClaimRequest::new(&key, hash("a"), LEASE, ttl)).await;
    let record = redis_record_key(&store, &key).await;
    let t = pttl(record.clone()).await;
    assert!(
        t <= ttl + margin && t > ttl + margin - Duration::from_secs(5),
        "{t:?}"
    );
    // A longer lease and a snapshot's own expiry move it along.
    let long = store
        .extend(&lease, Duration::from_secs(600))
        .await
        .unwrap();
    let t = pttl(record.clone()).await;
    assert!(
        t > Duration::from_secs(600) + margin - Duration::from_secs(5),
        "{t:?}"
    );
    let until = idem_runtime::store::Clock::now(&*clock) + Duration::from_secs(3600);
    store
        .complete(&long, &done().with_expire_at(until))
        .await
        .unwrap();
    let t = pttl(record.clone()).await;
    assert!(
        t > Duration::from_secs(3600) + margin - Duration::from_secs(5),
        "{t:?}"
    );

    // Redis deleted it (as its expiry would): the purge drops the entry and counts nothing.
    let () = redis::cmd("DEL")
        .arg(&record)
        .query_async(&mut conn)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(3601));
    assert_eq!(store.purge_expired(10).await.unwrap(), 0);
    let index = record.replace(&format!("rec:{}", key.hash_hex()), "expire_at");
    let left: i64 = redis::cmd("ZCARD")
        .arg(&index)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert!(store.get(&key).await.unwrap().is_none());
    let fresh = acquire(&store, &req(&key, hash("b"))).await;
    assert_eq!(fresh.fence, 1);
}

/// Completion inside the caller's transaction: the business write and the snapshot commit
/// together, or neither does; a zombie's transaction is refused; the business table's own
/// unique constraint on the operation id stops a taken-over operation from running twice (S23).
///
/// The business table (one per run) has a surrogate primary key and the unique constraint
/// `uk_payment_operation` on `operation_id`: the second payment must be rejected by exactly
/// that constraint, so the test fails if the table lacked it.
macro_rules! tx_completion_test {
    ($name:ident, $store:expr, $create:expr, $insert:expr) => {
        #[tokio::test]
        async fn $name() {
            let Some(store) = $store.await else { return };
            let clock = Arc::new(ManualClock::starting_now());
            let store = store.with_clock(clock.clone());
            let table = format!(
                "idem_test_payments_{}_{}",
                std::process::id(),
                idem_runtime::store::Clock::now(&*clock).as_millis()
            );
            let insert = format!($insert, t = table);
            sqlx::query(sqlx::AssertSqlSafe(format!($create, t = table)))
                .execute(store.pool())
                .await
                .unwrap();

            // Commit: both land.
            let key = unique_key("tx-commit");
            let lease = acquire(&store, &req(&key, hash("a"))).await;
            let mut tx = store.pool().begin().await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
                .bind(&lease.operation_id)
                .execute(&mut *tx)
                .await
                .unwrap();
            store.complete_in(&mut tx, &lease, &done()).await.unwrap();
            tx.commit().await.unwrap();
            let rec = store.get(&key).await.unwrap().unwrap();
            assert_eq!(
                (rec.state, rec.biz_no.as_deref()),
                (RecordState::Completed, Some("B-1"))
            );

            // Rollback: neither lands; the record is still processing under the same lease.
            let key = unique_key("tx-rollback");
            let lease = acquire(&store, &req(&key, hash("a"))).await;
            let mut tx = store.pool().begin().await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
                .bind(&lease.operation_id)
                .execute(&mut *tx)
                .await
                .unwrap();
            store.complete_in(&mut tx, &lease, &done()).await.unwrap();
            tx.rollback().await.unwrap();
            assert_eq!(
                store.get(&key).await.unwrap().unwrap().state,
                RecordState::Processing
            );
            store.complete(&lease, &done()).await.unwrap();

            // Zombie: its lease was taken over; its transaction must roll back.
            let key = unique_key("tx-zombie");
            let short = Duration::from_secs(5);
            let zombie = acquire(&store, &ClaimRequest::new(&key, hash("a"), short, TTL)).await;
            clock.advance(Duration::from_secs(6));
            let holder = acquire(&store, &ClaimRequest::new(&key, hash("a"), short, TTL)).await;
            assert_eq!(holder.operation_id, zombie.operation_id);
            // The zombie wrote its business row and committed it without completing (it
            // crashed in between, or completes outside the transaction) ...
            sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
                .bind(&zombie.operation_id)
                .execute(store.pool())
                .await
                .unwrap();
            // ... so the new holder's business write hits the unique constraint on the
            // operation id instead of paying twice (S23).
            let mut tx = store.pool().begin().await.unwrap();
            let dup = sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
                .bind(&holder.operation_id)
                .execute(&mut *tx)
                .await;
            let err = match dup {
                Err(sqlx::Error::Database(e)) => e,
                other => {
                    panic!("the business table's unique constraint must reject it, got {other:?}")
                }
            };
            assert_eq!(err.kind(), sqlx::error::ErrorKind::UniqueViolation, "{err}");
            let named = err
                .constraint()
                .is_some_and(|c| c == "uk_payment_operation")
                || err.message().contains("uk_payment_operation")
                || err.message().contains(&format!("{table}.operation_id"));
            assert!(named, "rejected by another constraint: {err}");
            drop(tx);
            let payments: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {table} WHERE operation_id = '{}'",
                zombie.operation_id
            )))
            .fetch_one(store.pool())
            .await
            .unwrap();
            assert_eq!(payments, 1, "paid once");
            // And a zombie completing inside its transaction is fenced out.
            let mut tx = store.pool().begin().await.unwrap();
            match store.complete_in(&mut tx, &zombie, &done()).await {
                Err(StoreError::FencedOut { .. }) => {}
                other => panic!("expected FencedOut, got {other:?}"),
            }
            tx.rollback().await.unwrap();
            store.complete(&holder, &done()).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
                .execute(store.pool())
                .await
                .unwrap();
        }
    };
}

tx_completion_test!(
    postgres_complete_in_transaction,
    postgres_store(),
    "CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, operation_id TEXT NOT NULL, amount BIGINT NOT NULL, \
     CONSTRAINT uk_payment_operation UNIQUE (operation_id))",
    "INSERT INTO {t} (operation_id, amount) VALUES ($1, 100)"
);
tx_completion_test!(
    mysql_complete_in_transaction,
    mysql_store(),
    "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, operation_id VARCHAR(64) NOT NULL, \
     amount BIGINT NOT NULL, UNIQUE KEY uk_payment_operation (operation_id))",
    "INSERT INTO {t} (operation_id, amount) VALUES (?, 100)"
);
tx_completion_test!(
    sqlite_complete_in_transaction,
    async {
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap()));
        Some(sqlite_store(&dir.path().join("tx.db")).await)
    },
    "CREATE TABLE {t} (id INTEGER PRIMARY KEY, operation_id TEXT NOT NULL, amount INTEGER NOT NULL, \
     CONSTRAINT uk_payment_operation UNIQUE (operation_id))",
    "INSERT INTO {t} (operation_id, amount) VALUES (?1, 100)"
);

/// The application's own sqlx migrations and idem's never share a history table.
async fn app_migrations_coexist<DB>(pool: &sqlx::Pool<DB>, store: &dyn Store, ddl: &str)
where
    DB: sqlx::Database,
    <DB as sqlx::Database>::Connection: sqlx::migrate::Migrate,
{
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("1_app_table.sql"), ddl).unwrap();
    let app = sqlx::migrate::Migrator::new(dir.path()).await.unwrap();
    app.run(pool).await.unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    // The application's history knows only its own migration: no VersionMissing either way.
    app.run(pool).await.unwrap();
}

#[tokio::test]
async fn postgres_migration_history_is_idem_own() {
    let Some(store) = postgres_store().await else {
        return;
    };
    app_migrations_coexist(
        store.pool(),
        &store,
        "CREATE TABLE IF NOT EXISTS app_orders (id BIGINT PRIMARY KEY)",
    )
    .await;
    let ours: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM idem._sqlx_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(ours, [20261130000001, 20261207000001, 20261207000002]);
    let theirs: Vec<i64> = sqlx::query_scalar("SELECT version FROM public._sqlx_migrations")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert!(ours.iter().all(|v| !theirs.contains(v)));
}

/// A database migrated by idem 0.1.0, whose PostgreSQL migration file did not create its schema
/// (so its checksum differs from today's file), still starts; any other checksum is refused.
#[tokio::test]
async fn postgres_database_migrated_by_0_1_0_still_starts() {
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    let (url, _guard) = private_database(&url, "pgold").await;
    let store = PostgresStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let record = |sha384: String| {
        sqlx::query(
            "UPDATE idem._sqlx_migrations SET checksum = decode($1, 'hex') \
             WHERE version = 20261130000001",
        )
        .bind(sha384)
        .execute(store.pool())
    };
    // SHA-384 of `20261130000001_idempotency_records.sql` as idem 0.1.0 shipped it.
    record("bd1c0b9a7c6ddb60d8550db1413eb315db89f9da2d8020ab220d27fcdd4902d6a26c2f932e36d831cda498a124b3df3c".to_owned())
        .await
        .unwrap();
    let restarted = PostgresStore::connect(&url).await.unwrap();
    restarted.migrate().await.unwrap();
    record("00".repeat(48)).await.unwrap();
    let err = restarted.migrate().await.unwrap_err();
    assert!(matches!(err, StoreError::Migrate { .. }), "{err}");
}

#[tokio::test]
async fn mysql_migration_history_is_idem_own() {
    let Some(store) = mysql_store().await else {
        return;
    };
    app_migrations_coexist(
        store.pool(),
        &store,
        "CREATE TABLE IF NOT EXISTS app_orders (id BIGINT PRIMARY KEY)",
    )
    .await;
    let ours: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM idem_sqlx_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        ours,
        [
            20261130000001,
            20261201000001,
            20261201000002,
            20261207000001
        ]
    );
    let theirs: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert!(ours.iter().all(|v| !theirs.contains(v)));
}

/// The MariaDB table as the first migration created it (clustered on `key_hash`), holding
/// records in every state, is rebuilt in place by `20261201000001` (clustered on `(created_at,
/// operation_id)`, claim index `uk_idem_key`), where this build works too and stores more, then
/// by `20261201000002` (clustered on `claim_id`, filled by `UUID_SHORT()` in creation order):
/// completed records of both tables still replay byte for byte, a live lease still holds its key
/// and completes, claims go on deciding by the unique index, and the purge finds what expired.
#[tokio::test]
async fn mysql_tables_of_earlier_migrations_are_upgraded_in_place() {
    use sqlx::Executor;
    let Some(url) = server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    let (url, _guard) = private_database(&url, "myup").await;
    let clock = Arc::new(ManualClock::starting_now());
    let store = MySqlStore::connect(&url)
        .await
        .unwrap()
        .with_clock(clock.clone());
    // The database as a build with only the first migration left it; the history rows of the
    // later ones are kept aside, to record each as applied when the test applies it. The column
    // of `20261207000001` (remembered keys), which this build writes, is added by hand and
    // recorded as applied: the upgrade under test is the clustering's.
    store.migrate().await.unwrap();
    store
        .pool()
        .execute(sqlx::raw_sql(
            "CREATE TABLE later_history AS \
               SELECT * FROM idem_sqlx_migrations WHERE version > 20261130000001; \
             DROP TABLE idem_idempotency_records; \
             DELETE FROM idem_sqlx_migrations \
               WHERE version > 20261130000001 AND version < 20261207000001",
        ))
        .await
        .unwrap();
    store
        .pool()
        .execute(sqlx::raw_sql(include_str!(
            "../../migrations/mysql/20261130000001_idempotency_records.sql"
        )))
        .await
        .unwrap();
    store
        .pool()
        .execute("ALTER TABLE idem_idempotency_records ADD COLUMN replay_until BIGINT NULL")
        .await
        .unwrap();
    let primary = |pool: sqlx::MySqlPool| async move {
        sqlx::query_scalar::<_, String>(
            "SELECT column_name FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = 'idem_idempotency_records' \
               AND index_name = 'PRIMARY' ORDER BY seq_in_index",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    assert_eq!(primary(store.pool().clone()).await, ["key_hash"]);

    // Completed records of each table, a millisecond apart or more.
    let completed: Vec<_> = (0..50).map(|i| unique_key(&format!("up-{i}"))).collect();
    let complete_some = |keys: &[ScopedKey], from: usize| {
        let (store, clock) = (store.clone(), clock.clone());
        let keys = keys.to_vec();
        async move {
            for (i, key) in keys.iter().enumerate().map(|(i, k)| (i + from, k)) {
                let lease = acquire(&store, &req(key, hash("a"))).await;
                let body = format!("body-{i}").into_bytes();
                let done =
                    Completion::new(Outcome::Completed, 201, body).with_biz_no(format!("B-{i}"));
                store.complete(&lease, &done).await.unwrap();
                clock.advance(Duration::from_millis(3));
            }
        }
    };
    complete_some(&completed[..25], 0).await;
    // A live lease and a record that expires, both of the first table.
    let live_key = unique_key("up-live");
    let live = acquire(&store, &req(&live_key, hash("b"))).await;
    let expired_key = unique_key("up-expired");
    let short = ClaimRequest::new(
        &expired_key,
        hash("c"),
        Duration::from_secs(1),
        Duration::from_secs(2),
    );
    let expired = acquire(&store, &short).await;
    store.complete(&expired, &done()).await.unwrap();
    // The purge's statement names no primary key: it runs on this table (nothing expired yet).
    assert_eq!(store.purge_expired(1000).await.unwrap(), 0);

    // A build with the second migration: the table clustered on `(created_at, operation_id)`.
    store
        .pool()
        .execute(sqlx::raw_sql(concat!(
            include_str!("../../migrations/mysql/20261201000001_cluster_by_created_at.sql"),
            "\nINSERT INTO idem_sqlx_migrations \
               SELECT * FROM later_history WHERE version = 20261201000001"
        )))
        .await
        .unwrap();
    assert_eq!(
        primary(store.pool().clone()).await,
        ["created_at", "operation_id"]
    );
    complete_some(&completed[25..], 25).await;
    assert_eq!(store.purge_expired(1000).await.unwrap(), 0);
    clock.advance(Duration::from_secs(3));

    // The new build starts: the pending migration rebuilds the table.
    store.migrate().await.unwrap();
    assert_eq!(primary(store.pool().clone()).await, ["claim_id"]);
    let unique: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT index_name, column_name, CAST(non_unique AS SIGNED) FROM information_schema.statistics \
         WHERE table_schema = DATABASE() AND table_name = 'idem_idempotency_records' \
           AND index_name = 'uk_idem_key'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        unique,
        [("uk_idem_key".to_owned(), "key_hash".to_owned(), 0)]
    );
    // Every record got an id of its own, in the order the records were created.
    let claim_ids = |pool: sqlx::MySqlPool| async move {
        sqlx::query_as::<_, (u64, i64)>(
            "SELECT claim_id, created_at FROM idem_idempotency_records ORDER BY claim_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let ids = claim_ids(store.pool().clone()).await;
    assert_eq!(ids.len(), 52);
    assert!(
        ids.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "claim ids not in creation order: {ids:?}"
    );

    for (i, key) in completed.iter().enumerate() {
        match store.claim(&req(key, hash("a"))).await.unwrap() {
            Claim::Completed(rec) => {
                assert_eq!(rec.status, Some(201));
                assert_eq!(rec.body, format!("body-{i}").into_bytes());
                assert_eq!(rec.biz_no, Some(format!("B-{i}")));
            }
            other => panic!("record {i} not replayed after the upgrade: {other:?}"),
        }
    }
    assert!(matches!(
        store.claim(&req(&live_key, hash("b"))).await.unwrap(),
        Claim::InProgress { .. }
    ));
    store.complete(&live, &done()).await.unwrap();
    assert!(matches!(
        store.claim(&req(&live_key, hash("b"))).await.unwrap(),
        Claim::Completed(_)
    ));
    // The expired record is replaced by a new operation, then purged with nothing else.
    let again = acquire(&store, &short).await;
    assert_eq!(again.fence, 2);
    store.release(&again).await.unwrap();
    let fresh_key = unique_key("up-fresh");
    acquire(&store, &req(&fresh_key, hash("d"))).await;
    assert!(matches!(
        store.claim(&req(&fresh_key, hash("d"))).await.unwrap(),
        Claim::InProgress { .. }
    ));
    // A new record goes to the table's right edge.
    let ids = claim_ids(store.pool().clone()).await;
    assert_eq!(ids.len(), 52);
    let fresh_id: u64 =
        sqlx::query_scalar("SELECT claim_id FROM idem_idempotency_records WHERE idem_key = ?")
            .bind(fresh_key.readable())
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(ids.last().unwrap().0, fresh_id);
    let expiring = unique_key("up-expiring");
    let lease = acquire(
        &store,
        &ClaimRequest::new(
            &expiring,
            hash("e"),
            Duration::from_secs(1),
            Duration::from_secs(2),
        ),
    )
    .await;
    store.complete(&lease, &done()).await.unwrap();
    clock.advance(Duration::from_secs(3));
    assert_eq!(store.purge_expired(1000).await.unwrap(), 1);
    assert!(store.get(&expiring).await.unwrap().is_none());
    assert!(store.get(&completed[0]).await.unwrap().is_some());
}

/// Should the primary key ever collide (`claim_id` is `UUID_SHORT()`, unique on one server; two
/// servers of one `server_id` writing one table could repeat it), the claim of another key is
/// never decided on the row it collided with: the plain `INSERT` reads its own key and finds no
/// row, and `ON DUPLICATE KEY UPDATE .. RETURNING`, which acts on any unique index and returns
/// the row it met, is checked against the claim's key. Both claim again, and answer
/// `Unavailable` rather than with another key's record. A constant default stands in for the
/// repeated id.
#[tokio::test]
async fn mysql_primary_key_collision_never_answers_for_another_key() {
    use sqlx::Executor;
    let Some(url) = server_url("IDEM_TEST_MYSQL_URL") else {
        return;
    };
    let (url, _guard) = private_database(&url, "mypk").await;
    let plain = MySqlStore::connect(&url).await.unwrap();
    plain.migrate().await.unwrap();
    plain
        .pool()
        .execute("ALTER TABLE idem_idempotency_records ALTER COLUMN claim_id SET DEFAULT 7")
        .await
        .unwrap();
    let returning = plain.clone().with_one_round_trip_replays();
    let first = unique_key("pk-first");
    let lease = acquire(&plain, &req(&first, hash("a"))).await;
    plain.complete(&lease, &done()).await.unwrap();
    for store in [&plain, &returning] {
        // The same request hash: decided on the first key's row, this would be its replay.
        let other = unique_key("pk-other");
        match store.claim(&req(&other, hash("a"))).await {
            Err(StoreError::Unavailable { .. }) => {}
            other => panic!("a claim colliding on the primary key answered {other:?}"),
        }
        assert!(store.get(&other).await.unwrap().is_none());
    }
    assert!(matches!(
        returning.claim(&req(&first, hash("a"))).await.unwrap(),
        Claim::Completed(_)
    ));
    // With ids of their own again, claims of new keys go through.
    plain
        .pool()
        .execute(
            "ALTER TABLE idem_idempotency_records ALTER COLUMN claim_id SET DEFAULT (UUID_SHORT())",
        )
        .await
        .unwrap();
    acquire(&returning, &req(&unique_key("pk-after"), hash("a"))).await;
}

/// The writing statements hand the server's "now" back through `LAST_INSERT_ID(now)` in the OK
/// packet. On the server's clock (no override), the lease each path returns is exactly the one
/// it stored, and starts within the test's own clock's window: the fresh insert, the takeover of
/// an ended lease, the extension, the replacement of an expired record. (An `INSERT` into a
/// table with an `AUTO_INCREMENT` column reports the generated id there instead.)
#[tokio::test]
async fn mysql_leases_carry_the_server_clock() {
    let Some(store) = mysql_store().await else {
        return;
    };
    let key = unique_key("server-now");
    let lease_d = Duration::from_millis(400);
    let request = ClaimRequest::new(&key, hash("a"), lease_d, Duration::from_millis(800));
    let stored = |lease: Lease| {
        let store = store.clone();
        async move {
            let rec = store.get(&lease.key).await.unwrap().unwrap();
            assert_eq!(rec.lease_until, lease.lease_until, "{lease:?}");
            assert_eq!(rec.expire_at, lease.expire_at, "{lease:?}");
            assert_eq!(rec.fence, lease.fence);
            rec
        }
    };
    // Server and test run on one host: a start outside this window is not the server's "now".
    let within = |before: idem_runtime::store::Timestamp, lease: &Lease, by: Duration| {
        let after = SystemClock.now();
        let start = lease.lease_until.as_millis() - by.as_millis() as i64;
        assert!(
            start >= before.as_millis() - 2_000 && start <= after.as_millis() + 2_000,
            "lease starting at {start} ms, outside {before:?}..{after:?}"
        );
    };

    let before = SystemClock.now();
    let fresh = acquire(&store, &request).await;
    within(before, &fresh, lease_d);
    let rec = stored(fresh.clone()).await;
    assert_eq!(
        rec.locked_at.as_millis(),
        fresh.lease_until.as_millis() - 400
    );

    tokio::time::sleep(Duration::from_millis(450)).await;
    let before = SystemClock.now();
    let taken = acquire(&store, &request).await;
    assert!(taken.took_over);
    within(before, &taken, lease_d);
    stored(taken.clone()).await;

    let before = SystemClock.now();
    let extended = store
        .extend(&taken, Duration::from_millis(500))
        .await
        .unwrap();
    within(before, &extended, Duration::from_millis(500));
    stored(extended.clone()).await;

    let before = SystemClock.now();
    store.complete(&extended, &done()).await.unwrap();
    let rec = store.get(&key).await.unwrap().unwrap();
    let completed_at = rec.completed_at.unwrap().as_millis();
    assert!(
        completed_at >= before.as_millis() - 2_000
            && completed_at <= SystemClock.now().as_millis() + 2_000
    );

    tokio::time::sleep(Duration::from_millis(900)).await;
    let before = SystemClock.now();
    let replaced = acquire(&store, &request).await;
    assert!(!replaced.took_over);
    assert_eq!(replaced.fence, 3);
    within(before, &replaced, lease_d);
    stored(replaced.clone()).await;
    store.release(&replaced).await.unwrap();
}

#[tokio::test]
async fn sqlite_migration_history_is_idem_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("m.db")).await.unwrap();
    // Before migrate(): a clear configuration error, not a bug report.
    let key = unique_key("nomigrate");
    match store.claim(&req(&key, hash("a"))).await {
        Err(e @ StoreError::Config { .. }) => assert!(e.to_string().contains("migrate"), "{e}"),
        other => panic!("expected Config, got {other:?}"),
    }
    app_migrations_coexist(
        store.pool(),
        &store,
        "CREATE TABLE app_orders (id INTEGER PRIMARY KEY)",
    )
    .await;
    let ours: Vec<i64> = sqlx::query_scalar("SELECT version FROM idem_sqlx_migrations")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(ours, [20261130000001, 20261207000001]);
    let theirs: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(theirs, [1]);
}

/// An instance restarted while others write to the same file: its `migrate()` finds the schema
/// up to date and returns, without queueing for the write lock. (It used to take the lock
/// first, `BEGIN IMMEDIATE`: on a busy database, where every claim is a write, it waited out
/// the busy timeout and failed with "database is locked", and the instance did not start —
/// `tests/faults/chaos`, 4 processes of the example on one file.) Here another connection holds the
/// write lock throughout.
#[tokio::test]
async fn sqlite_migrate_when_up_to_date_takes_no_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    sqlite_store(&path).await; // migrated once
    use sqlx::{Connection, Executor};
    let mut writer = sqlx::SqliteConnection::connect_with(&SqliteStore::options(&path))
        .await
        .unwrap();
    writer.execute("BEGIN IMMEDIATE").await.unwrap();
    let restarted = SqliteStore::open(&path).await.unwrap();
    let migrated = tokio::time::timeout(Duration::from_secs(60), restarted.migrate())
        .await
        .expect("migrate() hung");
    assert!(migrated.is_ok(), "{migrated:?}");
    writer.execute("ROLLBACK").await.unwrap();
}

#[tokio::test]
async fn sqlite_corrupt_row_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(&dir.path().join("corrupt.db")).await;
    let key = unique_key("corrupt");
    let lease = acquire(&store, &req(&key, hash("a"))).await;
    store.complete(&lease, &done()).await.unwrap();
    sqlx::query("UPDATE idem_idempotency_records SET resp_headers = x'02' WHERE key_hash = ?1")
        .bind(&key.hash()[..])
        .execute(store.pool())
        .await
        .unwrap();
    match store.claim(&req(&key, hash("a"))).await {
        Err(StoreError::Corrupt { key_hash, detail }) => {
            assert_eq!(key_hash, Some(key.hash_hex().to_string()));
            assert!(detail.contains("headers"), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// The table has no CHECK constraints (they cost every write; migration `20261207000002`): a
/// row another writer left in a state no build writes is refused as corrupt, never replayed nor
/// run again, and a lease whose record was changed so does not have its completion acknowledged.
#[tokio::test]
async fn postgres_row_in_an_unknown_state_is_reported() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let set_state_7 = |key: ScopedKey| {
        let pool = store.pool().clone();
        async move {
            sqlx::query("UPDATE idem.idempotency_records SET state = 7 WHERE key_hash = $1")
                .bind(&key.hash()[..])
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    let (stored, running) = (unique_key("pgcorrupt"), unique_key("pgcorrupt-run"));
    let lease = acquire(&store, &req(&stored, hash("a"))).await;
    store.complete(&lease, &done()).await.unwrap();
    set_state_7(stored.clone()).await;
    for _ in 0..2 {
        match store.claim(&req(&stored, hash("a"))).await {
            Err(StoreError::Corrupt { key_hash, detail }) => {
                assert_eq!(key_hash, Some(stored.hash_hex().to_string()));
                assert!(detail.contains("unknown state 7"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    // Changed under a running lease: its completion matches no row, and the record's owner
    // (same fence and operation id, state 7) is not "completed earlier".
    let lease = acquire(&store, &req(&running, hash("a"))).await;
    set_state_7(running.clone()).await;
    let completed = store.complete(&lease, &done()).await;
    assert!(
        matches!(completed, Err(StoreError::FencedOut { .. })),
        "{completed:?}"
    );
    sqlx::query("DELETE FROM idem.idempotency_records WHERE key_hash IN ($1, $2)")
        .bind(&stored.hash()[..])
        .bind(&running.hash()[..])
        .execute(store.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_missing_table_is_a_config_error() {
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    // A database of its own, never migrated.
    let admin = PostgresStore::connect(&url).await.unwrap();
    let db = format!("idem_nomigrate_{}", std::process::id());
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db}")))
        .execute(admin.pool())
        .await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(admin.pool())
        .await
        .unwrap();
    let url = format!("{}/{db}", url.rsplit_once('/').unwrap().0);
    let store = PostgresStore::connect(&url).await.unwrap();
    let key = unique_key("nomigrate");
    assert!(matches!(
        store.claim(&req(&key, hash("a"))).await,
        Err(StoreError::Config { .. })
    ));
    store.pool().close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}")))
        .execute(admin.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn sweeper_purges_in_the_background() {
    let clock = Arc::new(ManualClock::starting_now());
    let store = Arc::new(idem_runtime::store::MemoryStore::with_clock(clock.clone()));
    for _ in 0..30 {
        let key = unique_key("sweep");
        acquire(
            &*store,
            &ClaimRequest::new(&key, hash("a"), LEASE, Duration::from_secs(1)),
        )
        .await;
    }
    clock.advance(LEASE); // a record lives at least as long as its lease
    let handle = idem_runtime::store::Sweeper::new(store.clone())
        .interval(Duration::from_millis(10))
        .batch(7)
        .spawn();
    for _ in 0..500 {
        if handle.purged() == 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(handle.purged(), 30);
    assert_eq!(handle.errors(), 0);
    assert!(store.is_empty());
    handle.stop().await;
}

/// A purge batch that deleted records counts as a write toward the background checkpoint, so a
/// store that only purges checkpoints too: 63 claims and their completions are 126 writes (no
/// checkpoint yet); the two batches that purge them are the 127th and 128th, and start one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_purge_batches_count_toward_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::starting_now());
    let store = sqlite_store(&dir.path().join("purge-wal.db"))
        .await
        .with_clock(clock.clone());
    for i in 0..63 {
        let key = idem_runtime::key::ScopedKey::new(&["t"], "wal", &format!("p{i}")).unwrap();
        let lease = acquire(&store, &req(&key, hash("a"))).await;
        store.complete(&lease, &done()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(store.checkpoint_count(), 0);
    clock.advance(TTL + Duration::from_secs(1));
    assert_eq!(store.purge_expired(50).await.unwrap(), 50);
    assert_eq!(store.purge_expired(50).await.unwrap(), 13);
    assert_eq!(store.purge_expired(50).await.unwrap(), 0, "not a write");
    for _ in 0..5_000 {
        if store.checkpoint_count() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(store.checkpoint_count(), 1);
}

/// The SQLite store checkpoints its WAL on a task of its own every 128 writes, so that no
/// commit of a request pays for it: 300 claims and their completions (600 writes) start four
/// (fewer, if one still runs at the next multiple of 128), and every record is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_checkpoints_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(&dir.path().join("wal.db")).await;
    let keys: Vec<_> = (0..300)
        .map(|i| idem_runtime::key::ScopedKey::new(&["t"], "wal", &format!("k{i}")).unwrap())
        .collect();
    for key in &keys {
        let lease = acquire(&store, &req(key, hash("a"))).await;
        store.complete(&lease, &done()).await.unwrap();
    }
    for _ in 0..5_000 {
        if store.checkpoint_count() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!((1..=4).contains(&store.checkpoint_count()));
    for key in &keys {
        let record = store.get(key).await.unwrap().expect("stored");
        assert_eq!(record.state, RecordState::Completed);
    }
}

/// The store's writes go through a connection of their own: with every connection of
/// [`SqliteStore::pool`] taken (a caller's, here), a claim still goes through. A pool of one
/// connection is honoured as one connection: the same claim then waits for it, and gives up
/// when the pool's acquire timeout runs out.
#[tokio::test]
async fn sqlite_writes_have_a_connection_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    for (connections, claims) in [(2, true), (1, false)] {
        let path = dir.path().join(format!("writer-{connections}.db"));
        let store = SqliteStore::connect_with_pool(
            SqliteStore::pool_options()
                .max_connections(connections)
                .acquire_timeout(Duration::from_millis(300)),
            SqliteStore::options(&path),
        )
        .await
        .unwrap();
        store.migrate().await.unwrap();
        let mut held = Vec::new();
        for _ in 0..connections {
            held.push(store.pool().acquire().await.unwrap());
        }
        let key = unique_key("writer");
        let claimed = store.claim(&req(&key, hash("a"))).await;
        assert_eq!(
            matches!(claimed, Ok(Claim::Acquired(_))),
            claims,
            "{connections} connections: {claimed:?}"
        );
        if !claims {
            assert!(
                matches!(claimed, Err(StoreError::Unavailable { .. })),
                "{claimed:?}"
            );
        }
        drop(held);
    }
}

/// A write given up on does not wedge the kept writer connection: a claim waiting for SQLite's
/// write lock (held by another connection) is dropped mid-statement (the store then hands the
/// connection back to its pool, which the test cannot see); once the lock is gone, the writes
/// after it go through, and the dropped claim's statement, which the connection finished on its
/// own, left a record that is answered as any other (in progress here, never a second fresh
/// claim of the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_write_given_up_on_does_not_wedge_the_writer() {
    use sqlx::{Connection, Executor};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("given-up.db");
    let store = sqlite_store(&path).await;
    let warm = unique_key("given-up-warm");
    assert!(matches!(
        store.claim(&req(&warm, hash("a"))).await.unwrap(),
        Claim::Acquired(_)
    ));
    let mut locker = sqlx::SqliteConnection::connect_with(&SqliteStore::options(&path))
        .await
        .unwrap();
    locker.execute("BEGIN IMMEDIATE").await.unwrap();
    let dropped = unique_key("given-up");
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        store.claim(&req(&dropped, hash("a"))),
    )
    .await;
    assert!(
        gave_up.is_err(),
        "the claim waited for the lock: {gave_up:?}"
    );
    locker.execute("ROLLBACK").await.unwrap();
    for _ in 0..3 {
        let key = unique_key("given-up-after");
        let claimed =
            tokio::time::timeout(Duration::from_secs(10), store.claim(&req(&key, hash("a"))))
                .await
                .expect("a write after the one given up on hung");
        assert!(matches!(claimed, Ok(Claim::Acquired(_))), "{claimed:?}");
    }
    let again = store.claim(&req(&dropped, hash("a"))).await.unwrap();
    assert!(matches!(again, Claim::InProgress { .. }), "{again:?}");
}

/// A store that wrote (and so holds its writer connection) can be dropped after its runtime is
/// gone, as a store kept beside a runtime it outlives is: no panic, and the file opens again.
#[test]
fn sqlite_store_outlives_its_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outlives.db");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(async {
        let store = sqlite_store(&path).await;
        let key = unique_key("outlives");
        let claimed = store.claim(&req(&key, hash("a"))).await.unwrap();
        assert!(matches!(claimed, Claim::Acquired(_)), "{claimed:?}");
        store
    });
    drop(runtime);
    drop(store);
    let again = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    again.block_on(async {
        let store = sqlite_store(&path).await;
        let key = unique_key("outlives-again");
        let claimed = store.claim(&req(&key, hash("a"))).await.unwrap();
        assert!(matches!(claimed, Claim::Acquired(_)), "{claimed:?}");
    });
}

/// Writes that never pause still restart the WAL before SQLite's automatic checkpoint (raised
/// to 2,000 pages on the store's writer connection) runs inside one of them: once the log
/// holds 1,000 frames, the store's second checkpoint step, on the writer connection, copies what
/// was written during the first. Four tasks claim and complete without a break until the
/// store has checkpointed 8 times (1,000+ writes, 3 or so frames each); the log file, which
/// keeps the size of its longest run between two restarts, stays under 1,800 frames. Without
/// the second step it reached the 2,000 of the backstop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_log_restarts_under_continuous_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = Arc::new(sqlite_store(&path).await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let key = ScopedKey::new(&["t"], "busy", &format!("w{w}-{i}")).unwrap();
                    let lease = acquire(&*store, &req(&key, hash("a"))).await;
                    store.complete(&lease, &done()).await.unwrap();
                    i += 1;
                }
                i
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while store.checkpoint_count() < 8 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut claims = 0;
    for w in writers {
        claims += w.await.unwrap();
    }
    assert!(
        store.checkpoint_count() >= 8,
        "{} checkpoints",
        store.checkpoint_count()
    );
    let wal = std::fs::metadata(dir.path().join("busy.db-wal"))
        .unwrap()
        .len();
    // Frames of a 4 KiB page and a 24-byte header, after the 32-byte file header.
    let frames = (wal - 32) / (4_096 + 24);
    assert!(
        frames < 1_800,
        "the log grew to {frames} frames over {claims} claims: it did not restart in time"
    );
}

/// Two processes claim the same 300 keys in one SQLite file: every key has exactly one winner.
/// The child is this test binary again, running only this test with `IDEM_SQLITE_CHILD` set.
/// Both wait at a barrier (each creates its ready file, then waits for the other's) so that
/// they really run at once, and each claims the keys in its own shuffled order, so that they
/// contend all along: both must win some keys, which a late child would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_processes_one_file() {
    const KEYS: usize = 300;
    let keys: Vec<_> = (0..KEYS)
        .map(|i| {
            idem_runtime::key::ScopedKey::new(&["t", "u"], "two-process", &format!("k{i}")).unwrap()
        })
        .collect();
    /// Creates `mine`, then waits (at most ~60 s) until `theirs` exists.
    async fn barrier(mine: &std::path::Path, theirs: &std::path::Path) {
        std::fs::write(mine, b"ready").unwrap();
        for _ in 0..60_000 {
            if theirs.exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the other process never reached the barrier");
    }
    /// The indexes of `n` keys in an order given by `seed` (a multiplicative permutation).
    fn order(n: usize, seed: usize) -> Vec<usize> {
        let mut o: Vec<usize> = (0..n).collect();
        o.sort_by_key(|i| (i * 7919 + seed * 104_729) % 1_000_003 % (n * 3 + seed));
        o
    }
    async fn claim_all(
        store: &SqliteStore,
        keys: &[idem_runtime::key::ScopedKey],
        seed: usize,
    ) -> Vec<usize> {
        let mut won = Vec::new();
        for i in order(keys.len(), seed) {
            if let Claim::Acquired(lease) = store.claim(&req(&keys[i], hash("a"))).await.unwrap() {
                store.complete(&lease, &done()).await.unwrap();
                won.push(i);
            }
        }
        won
    }
    if let Ok(path) = std::env::var("IDEM_SQLITE_CHILD") {
        let path = std::path::PathBuf::from(path);
        let store = SqliteStore::open(&path).await.unwrap();
        barrier(
            &path.with_extension("child"),
            &path.with_extension("parent"),
        )
        .await;
        let won = claim_all(&store, &keys, 2).await;
        let won: Vec<String> = won.iter().map(usize::to_string).collect();
        println!("IDEM_CHILD_WON={};", won.join(","));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    sqlite_store(&path).await; // migrated once, before both start
    let child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "backends::sqlite_two_processes_one_file",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IDEM_SQLITE_CHILD", &path)
        .output();
    let parent = async {
        let store = SqliteStore::open(&path).await.unwrap();
        barrier(
            &path.with_extension("parent"),
            &path.with_extension("child"),
        )
        .await;
        let won = claim_all(&store, &keys, 1).await;
        (store, won)
    };
    let (child, (store, parent_won)) = tokio::join!(child, parent);
    let child = child.unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "child failed: {out}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let line = out
        .split("IDEM_CHILD_WON=")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no child result in: {out}"));
    let child_won: Vec<usize> = line
        .trim_end_matches(';')
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    eprintln!(
        "parent won {}, child won {}",
        parent_won.len(),
        child_won.len()
    );
    assert!(
        !parent_won.is_empty() && !child_won.is_empty(),
        "the processes did not contend: parent won {}, child {}",
        parent_won.len(),
        child_won.len()
    );
    let mut all: Vec<usize> = parent_won.iter().chain(&child_won).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..KEYS).collect::<Vec<_>>(),
        "every key exactly one winner"
    );
    for key in &keys {
        assert_eq!(
            store.get(key).await.unwrap().unwrap().state,
            RecordState::Completed
        );
    }
}

/// A `replay_until` left by a build from before `remember`, which replaces an expired record
/// without clearing the column, is not the new record's: its response is replayed within its
/// TTL, the purge leaves it alone, and a takeover does not make it remembered. `stale` writes
/// such a value (before the record's creation) into `key`'s record.
async fn stale_replay_until_is_not_the_records(
    store: &dyn Store,
    clock: &ManualClock,
    stale: impl AsyncFn(&ScopedKey),
) {
    let key = unique_key("stale");
    let lease = acquire(store, &req(&key, hash("a"))).await;
    store.complete(&lease, &done()).await.unwrap();
    stale(&key).await;
    clock.advance(Duration::from_secs(1));
    match store.claim(&req(&key, hash("a"))).await.unwrap() {
        Claim::Completed(r) => assert_eq!(r.body, b"ok"),
        other => panic!("expected Completed, got {other:?}"),
    }
    // Other tests' records may share the table: what counts is that this one keeps its body.
    store.purge_responses(1000).await.unwrap();
    assert!(matches!(
        store.claim(&req(&key, hash("a"))).await.unwrap(),
        Claim::Completed(r) if r.body == b"ok"
    ));
    // An attempt without a result, taken over: still a record of its TTL.
    let open = unique_key("stale-open");
    acquire(store, &req(&open, hash("a"))).await;
    stale(&open).await;
    clock.advance(LEASE + Duration::from_secs(1));
    let taken = acquire(store, &req(&open, hash("a"))).await;
    assert!(taken.took_over);
    store.complete(&taken, &done()).await.unwrap();
    clock.advance(LEASE + Duration::from_secs(1));
    assert!(matches!(
        store.claim(&req(&open, hash("a"))).await.unwrap(),
        Claim::Completed(r) if r.body == b"ok"
    ));
}

#[tokio::test]
async fn sqlite_stale_replay_until_is_not_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::starting_now());
    let store = sqlite_store(&dir.path().join("idem.db"))
        .await
        .with_clock(clock.clone());
    let pool = store.pool().clone();
    stale_replay_until_is_not_the_records(&store, &clock, async |key: &ScopedKey| {
        sqlx::query(
            "UPDATE idem_idempotency_records SET replay_until = created_at - 1000 \
             WHERE key_hash = ?1",
        )
        .bind(&key.hash()[..])
        .execute(&pool)
        .await
        .unwrap();
    })
    .await;
}

#[tokio::test]
async fn postgres_stale_replay_until_is_not_the_records() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let pool = store.pool().clone();
    let store = store.with_clock(clock.clone());
    stale_replay_until_is_not_the_records(&store, &clock, async |key: &ScopedKey| {
        sqlx::query(
            "UPDATE idem.idempotency_records SET replay_until = created_at - 1000 \
             WHERE key_hash = $1",
        )
        .bind(&key.hash()[..])
        .execute(&pool)
        .await
        .unwrap();
    })
    .await;
}

#[tokio::test]
async fn mysql_stale_replay_until_is_not_the_records() {
    let Some(store) = mysql_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let pool = store.pool().clone();
    let store = store.with_clock(clock.clone());
    stale_replay_until_is_not_the_records(&store, &clock, async |key: &ScopedKey| {
        sqlx::query(
            "UPDATE idem_idempotency_records SET replay_until = created_at - 1000 \
             WHERE key_hash = ?",
        )
        .bind(&key.hash()[..])
        .execute(&pool)
        .await
        .unwrap();
    })
    .await;
}

#[tokio::test]
async fn redis_stale_replay_until_is_not_the_records() {
    let Some(store) = redis_store().await else {
        return;
    };
    let clock = Arc::new(ManualClock::starting_now());
    let store = store.with_clock(clock.clone());
    let stale = async |key: &ScopedKey| {
        let record = redis_record_key(&store, key).await;
        let mut conn = store.connection().clone();
        let created: i64 = redis::cmd("HGET")
            .arg(&record)
            .arg("created_at")
            .query_async(&mut conn)
            .await
            .unwrap();
        let () = redis::cmd("HSET")
            .arg(&record)
            .arg("replay_until")
            .arg(created - 1000)
            .query_async(&mut conn)
            .await
            .unwrap();
    };
    stale_replay_until_is_not_the_records(&store, &clock, stale).await;
}
