//! The Redis store on a Redis Cluster and with replicas' acknowledgements: a cluster is found
//! from any node, Redis's own expiry purges a cluster's records, and a write the replicas did
//! not acknowledge in time is `Unavailable`, its claim given back for the retry.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::redis::{RedisStore, ReplicasBehind};
use idem_runtime::store::{
    Claim, ClaimRequest, Clock, Completion, Lease, ManualClock, Outcome, RecordState, Store,
    StoreError,
};

use crate::support::*;

fn done() -> Completion {
    Completion::new(Outcome::Completed, 201, b"paid".to_vec()).with_biz_no("P-1")
}

async fn acquire(store: &dyn Store, req: &ClaimRequest<'_>) -> Lease {
    match store.claim(req).await.unwrap() {
        Claim::Acquired(lease) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// The `ReplicasBehind` inside an `Unavailable`.
fn behind(e: StoreError) -> ReplicasBehind {
    match e {
        StoreError::Unavailable { source, .. } => match source.downcast::<ReplicasBehind>() {
            Ok(b) => *b,
            Err(other) => panic!("unavailable for another reason: {other}"),
        },
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// `connect` asks the server what it is: a plain server stays one, any node of a cluster (or a
/// list of seed nodes) connects to the whole cluster.
#[tokio::test]
async fn connect_finds_the_cluster_from_any_node() {
    if let Some(url) = server_url("IDEM_TEST_REDIS_URL") {
        assert!(!RedisStore::connect(&url).await.unwrap().is_cluster());
    }
    let Some(url) = server_url("IDEM_TEST_REDIS_CLUSTER_URL") else {
        return;
    };
    let store = RedisStore::connect(&url).await.unwrap();
    assert!(store.is_cluster());
    let seeds = format!("{url}, {url}");
    assert!(RedisStore::connect(&seeds).await.unwrap().is_cluster());
    match RedisStore::connect("redis://127.0.0.1:1/0,redis://[::1").await {
        Err(StoreError::Config { message, .. }) => {
            assert!(message.contains("Cluster"), "{message}")
        }
        other => panic!("expected Config, got {other:?}"),
    }
}

/// On a cluster each record's key carries its Redis expiry (`expire_at` + the margin, moved by
/// every write) and no index: the purge has nothing to walk, and once the expiry passes Redis
/// has deleted the record by itself, so that the key is claimed afresh at fence 1.
#[tokio::test]
async fn cluster_expiry_is_the_purge() {
    let Some(store) = redis_cluster_store().await else {
        return;
    };
    let margin = Duration::from_secs(120);
    let clock = Arc::new(ManualClock::starting_now());
    let held = store
        .clone()
        .with_clock(clock.clone())
        .with_expiry_margin(margin);
    let key = unique_key("cluster-expiry");
    let ttl = Duration::from_secs(60);
    let lease = acquire(&held, &ClaimRequest::new(&key, hash("a"), LEASE, ttl)).await;
    let record = format!("{}{}", record_prefix(&held), key.hash_hex());
    let mut conn = held.connection().clone();
    let pttl = |conn: &mut idem_runtime::store::redis::RedisConnection| {
        let record = record.clone();
        let mut conn = conn.clone();
        async move {
            let ms: i64 = redis::cmd("PTTL")
                .arg(record)
                .query_async(&mut conn)
                .await
                .unwrap();
            Duration::from_millis(ms.max(0) as u64)
        }
    };
    let t = pttl(&mut conn).await;
    assert!(
        t <= ttl + margin && t > ttl + margin - Duration::from_secs(5),
        "{t:?}"
    );
    let until = clock.now() + Duration::from_secs(3600);
    held.complete(&lease, &done().with_expire_at(until))
        .await
        .unwrap();
    let t = pttl(&mut conn).await;
    assert!(
        t > Duration::from_secs(3600) + margin - Duration::from_secs(5),
        "{t:?}"
    );
    assert_eq!(held.purge_expired(100).await.unwrap(), 0, "nothing to walk");

    // With no margin, on the real clock: gone by itself once its TTL passed.
    let short = store.with_expiry_margin(Duration::ZERO);
    let key = unique_key("cluster-expiry-real");
    let ms = Duration::from_millis(300);
    let lease = acquire(&short, &ClaimRequest::new(&key, hash("a"), ms, ms)).await;
    short.complete(&lease, &done()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let record = format!("{}{}", record_prefix(&short), key.hash_hex());
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&record)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0);
    assert_eq!(acquire(&short, &req(&key, hash("b"))).await.fence, 1);
}

/// The records' key prefix of `store`, from its `Debug` form.
fn record_prefix(store: &RedisStore) -> String {
    let debug = format!("{store:?}");
    let start = debug.find("records: \"").unwrap() + "records: \"".len();
    debug[start..].split('"').next().unwrap().to_owned()
}

/// A claim the replicas did not acknowledge in time is `Unavailable` (no lease handed out, so
/// the handler does not run) and given back: the retry takes it over at once under the same
/// operation id. A completion they did not acknowledge is `Unavailable` too, and its retry,
/// acknowledged, succeeds.
#[tokio::test]
async fn writes_the_replicas_did_not_acknowledge_are_unavailable() {
    let Some(store) = redis_cluster_store().await else {
        return;
    };
    // Every master of the test cluster has one replica: two never acknowledge.
    let strict = store
        .clone()
        .with_replica_acks(2, Duration::from_millis(200));
    let durable = store.clone().with_replica_acks(1, Duration::from_secs(2));
    let key = unique_key("acks");
    let b = behind(strict.claim(&req(&key, hash("a"))).await.unwrap_err());
    assert_eq!((b.what, b.acked, b.wanted), ("claim", 1, 2));
    let left = store.get(&key).await.unwrap().expect("the claim stays");
    assert_eq!(left.state, RecordState::Processing);
    assert!(left.lease_until <= store.clock().now(), "lease ended");

    let lease = acquire(&durable, &req(&key, hash("a"))).await;
    assert!(lease.took_over);
    assert_eq!(lease.operation_id, left.operation_id);

    let b = behind(strict.complete(&lease, &done()).await.unwrap_err());
    assert_eq!((b.what, b.acked), ("completion", 1));
    durable.complete(&lease, &done()).await.unwrap();
    let record = durable.get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.body, b"paid");
    // A replay needs no acknowledgement of its own.
    assert!(matches!(
        strict.claim(&req(&key, hash("a"))).await.unwrap(),
        Claim::Completed(_)
    ));
}

/// On a server without replicas, `with_replica_acks(1, ..)` refuses every claim: it cannot be
/// made to survive a failover, and the store says so instead of acknowledging it.
#[tokio::test]
async fn replica_acks_without_replicas_refuse_the_claim() {
    let Some(store) = redis_store().await else {
        return;
    };
    let store = store.with_replica_acks(1, Duration::from_millis(100));
    let key = unique_key("acks-alone");
    let b = behind(store.claim(&req(&key, hash("a"))).await.unwrap_err());
    assert_eq!((b.what, b.acked, b.wanted), ("claim", 0, 1));
    let e = StoreError::unavailable(b);
    assert!(e.is_transient());
}

/// The replication report reads the store's own sessions: a server without standbys keeps no
/// commit through a failover whatever `synchronous_commit` says, and a session with
/// `synchronous_commit = off` would not wait for a standby even if one were named. (A primary
/// with a standby, and the standby refused: `tests/faults/chaos/failover/`.)
#[tokio::test]
async fn postgres_replication_report() {
    let Some(url) = server_url("IDEM_TEST_POSTGRES_URL") else {
        return;
    };
    for commit in ["on", "off"] {
        let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
        let store = idem_runtime::store::postgres::PostgresStore::connect_with(
            options.options([("synchronous_commit", commit)]),
        )
        .await
        .unwrap();
        let r = store.replication().await.unwrap();
        assert!(!r.standby);
        assert_eq!(r.synchronous_commit, commit);
        assert_eq!(r.synchronous_standby_names, "");
        assert_eq!(r.streaming_standbys, 0);
        assert!(!r.keeps_commits_through_failover());
    }
}

/// A slot moved to another master while the store serves it, as `redis-cli --cluster reshard`
/// moves them: mid-migration a new key of the slot is claimed on the importing master (`ASK`),
/// the completed record of another key replays from the old one, and once the slot has moved
/// both replay from the new one (`MOVED`), the cluster client following every redirection.
#[tokio::test]
async fn cluster_slot_migration_is_followed() {
    let Some(store) = redis_cluster_store().await else {
        return;
    };
    let url = server_url("IDEM_TEST_REDIS_CLUSTER_URL").unwrap();
    let mut any = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let done_key = unique_key("reshard-done");
    let record = format!("{}{}", record_prefix(&store), done_key.hash_hex());
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&record)
        .query_async(&mut any)
        .await
        .unwrap();
    let lease = acquire(&store, &req(&done_key, hash("a"))).await;
    store.complete(&lease, &done()).await.unwrap();

    // The masters: id, address, and whether it serves `slot`.
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut any)
        .await
        .unwrap();
    let masters: Vec<(String, String, bool)> = nodes
        .lines()
        .filter(|l| l.contains("master") && !l.contains("fail"))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let addr = f[1].split('@').next().unwrap().to_owned();
            let serves = f[8..].iter().any(|r| match r.split_once('-') {
                Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).contains(&slot),
                None => r.parse::<u16>().ok() == Some(slot),
            });
            (f[0].to_owned(), addr, serves)
        })
        .collect();
    let (src_id, src_addr, _) = masters.iter().find(|m| m.2).unwrap().clone();
    let (dst_id, dst_addr, _) = masters.iter().find(|m| !m.2).unwrap().clone();
    let connect = |addr: String| async move {
        redis::Client::open(format!("redis://{addr}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    };
    let (mut src, mut dst) = (connect(src_addr).await, connect(dst_addr.clone()).await);
    let setslot = |state: &'static str, id: String| {
        let mut c = redis::cmd("CLUSTER");
        c.arg("SETSLOT").arg(slot).arg(state).arg(id);
        c
    };
    let () = setslot("IMPORTING", src_id.clone())
        .query_async(&mut dst)
        .await
        .unwrap();
    let () = setslot("MIGRATING", dst_id.clone())
        .query_async(&mut src)
        .await
        .unwrap();

    // Mid-migration: the existing record still answers from the old master, and a new key of
    // the slot, absent from the old master, is claimed and completed on the new one.
    assert!(matches!(
        store.claim(&req(&done_key, hash("a"))).await.unwrap(),
        Claim::Completed(_)
    ));
    let target = redis::cluster_routing::Slot::new(slot).unwrap();
    let new_key = std::iter::repeat_with(|| unique_key("reshard-new"))
        .find(|k| {
            let record = format!("{}{}", record_prefix(&store), k.hash_hex());
            redis::cluster_routing::Slot::for_key(record) == target
        })
        .unwrap();
    let new_lease = acquire(&store, &req(&new_key, hash("b"))).await;
    store.complete(&new_lease, &done()).await.unwrap();
    let new_record = format!("{}{}", record_prefix(&store), new_key.hash_hex());
    // The importing master answers for the slot only after `ASKING`.
    let (on_new,): (i64,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("EXISTS")
        .arg(&new_record)
        .query_async(&mut dst)
        .await
        .unwrap();
    assert_eq!(on_new, 1, "claimed on the importing master");

    // Move the record, then the slot.
    let (host, port) = dst_addr.rsplit_once(':').unwrap();
    let () = redis::cmd("MIGRATE")
        .arg(host)
        .arg(port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&record)
        .query_async(&mut src)
        .await
        .unwrap();
    for (_, addr, _) in &masters {
        let mut c = connect(addr.clone()).await;
        let () = setslot("NODE", dst_id.clone())
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let replay = match store.claim(&req(&done_key, hash("a"))).await.unwrap() {
        Claim::Completed(r) => r,
        other => panic!("expected the replay after the move, got {other:?}"),
    };
    assert_eq!(replay.body, b"paid");
    assert_eq!(replay.operation_id, lease.operation_id);
    match store.claim(&req(&new_key, hash("b"))).await.unwrap() {
        Claim::Completed(r) => assert_eq!(r.operation_id, new_lease.operation_id),
        other => panic!("expected the replay of the key claimed mid-migration, got {other:?}"),
    }
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&record)
        .query_async(&mut dst)
        .await
        .unwrap();
    assert_eq!(exists, 1, "the record lives on the new master");
}
