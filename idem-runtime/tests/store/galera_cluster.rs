//! The MariaDB store on a 3-node Galera cluster, written to on every node at once
//! (`IDEM_TEST_GALERA_URLS`, started by `scripts/test`): the store finds out it is on a cluster,
//! one claim wins a key however many nodes it is claimed on, and a record completed on one node
//! is read back on the others at once (causal reads). The store suite runs on the cluster too
//! (`main.rs`, `galera`).

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::mysql::MySqlStore;
use idem_runtime::store::{Claim, ClaimRequest, Clock, Completion, Outcome, Store};

use crate::support::*;

/// One store per node, each migrated (the table is created once, on the cluster).
async fn nodes() -> Option<Vec<Arc<dyn Store>>> {
    nodes_with(|store| store).await
}

/// [`nodes`], each store configured by `configure`.
async fn nodes_with(configure: fn(MySqlStore) -> MySqlStore) -> Option<Vec<Arc<dyn Store>>> {
    let urls = galera_urls()?;
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for url in &urls {
        let store = configure(galera_store(url).await);
        store.migrate().await.unwrap();
        stores.push(Arc::new(store));
    }
    Some(stores)
}

/// [`nodes`] whose sessions do not let the server re-run a statement that failed certification
/// (`wsrep_retry_autocommit = 0`; the default, 1, re-runs it once): the loser of a race across
/// nodes then gets the certification failure itself (1213), which the store sends again.
async fn nodes_without_server_retries() -> Option<Vec<Arc<dyn Store>>> {
    let urls = galera_urls()?;
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for url in &urls {
        let pool = MySqlStore::pool_options().after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(conn, "SET SESSION wsrep_retry_autocommit = 0").await?;
                Ok(())
            })
        });
        let store = MySqlStore::connect_with_pool(pool, url.parse().unwrap())
            .await
            .unwrap();
        assert!(store.is_galera());
        store.migrate().await.unwrap();
        stores.push(Arc::new(store));
    }
    Some(stores)
}

/// A plain MariaDB server is not taken for a cluster node; a store over a node's pool
/// (`from_pool` asks nothing) is one once told, and its clones too.
#[tokio::test]
async fn a_single_server_is_not_a_cluster() {
    let Some(store) = mysql_store().await else {
        return;
    };
    assert!(!store.is_galera());
    let Some(urls) = galera_urls() else { return };
    let node = galera_store(&urls[0]).await;
    let untold = MySqlStore::from_pool(node.pool().clone());
    assert!(!untold.is_galera());
    assert!(untold.with_galera(true).clone().is_galera());
}

/// The same key claimed at once through all three nodes, many times on each: exactly one claim
/// acquires it, every other one finds it in progress (a claim that lost on another node's
/// certification is sent again and reads the winner), and none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_key_on_three_nodes_has_one_winner() {
    let Some(nodes) = nodes().await else { return };
    one_winner_across(&nodes).await;
}

/// The same, with certification failures reaching the store (no retry by the server).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_certification_failure_of_a_claim_is_a_lost_race() {
    let Some(nodes) = nodes_without_server_retries().await else {
        return;
    };
    one_winner_across(&nodes).await;
}

async fn one_winner_across(nodes: &[Arc<dyn Store>]) {
    const PER_NODE: usize = 8;
    for round in 0..40 {
        let key = Arc::new(unique_key("galera-race"));
        let h = hash("a");
        let start = Arc::new(tokio::sync::Barrier::new(PER_NODE * nodes.len()));
        let tasks: Vec<_> = nodes
            .iter()
            .flat_map(|store| std::iter::repeat_n(store, PER_NODE))
            .map(|store| {
                let (store, key, start) = (store.clone(), key.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store.claim(&req(&key, h)).await
                })
            })
            .collect();
        let (mut winners, mut in_progress) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(Claim::Acquired(lease)) => {
                    assert_eq!(lease.fence, 1);
                    winners += 1;
                }
                Ok(Claim::InProgress { request_hash, .. }) if request_hash == h => in_progress += 1,
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(
            (winners, in_progress),
            (1, PER_NODE * nodes.len() - 1),
            "round {round}"
        );
    }
}

/// A record completed through one node is replayed through the others right after, never
/// claimed again and never seen in progress: the claim that finds the key reads the row
/// causally (`wsrep_sync_wait`), after the node applied the completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_on_one_node_is_replayed_on_the_others_at_once() {
    let Some(nodes) = nodes().await else { return };
    replayed_at_once(&nodes).await;
}

/// The same with claims in one round trip (`INSERT .. ON DUPLICATE KEY UPDATE .. RETURNING`):
/// the row that statement finds is read causally too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_is_replayed_at_once_by_one_round_trip_claims() {
    let Some(nodes) = nodes_with(MySqlStore::with_one_round_trip_replays).await else {
        return;
    };
    replayed_at_once(&nodes).await;
}

async fn replayed_at_once(nodes: &[Arc<dyn Store>]) {
    for round in 0..300 {
        let key = unique_key("galera-replay");
        let h = hash("a");
        let req = ClaimRequest::new(&key, h, Duration::from_secs(30), TTL);
        let first = &nodes[round % nodes.len()];
        let Claim::Acquired(lease) = first.claim(&req).await.unwrap() else {
            panic!("round {round}: a fresh key not acquired");
        };
        let body = format!("paid {round}").into_bytes();
        let done = Completion::new(Outcome::Completed, 201, body.clone());
        first.complete(&lease, &done).await.unwrap();
        for (i, other) in nodes.iter().enumerate() {
            match other.claim(&req).await.unwrap() {
                Claim::Completed(record) => {
                    assert_eq!(record.body, body, "round {round}, node {i}");
                    assert_eq!(record.operation_id, lease.operation_id);
                }
                other => panic!("round {round}, node {i}: {other:?}"),
            }
        }
    }
}

/// Three processes, each on its own node, migrating a fresh database at once (what every
/// process of a service does as it starts): each node's `GET_LOCK` is its own, so the history
/// row each writes first is the claim of a migration; all three succeed, and each migration ran
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_migrate_a_fresh_database_at_once() {
    let Some(urls) = galera_urls() else { return };
    for _ in 0..8 {
        let (first, _guard) = private_database(&urls[0], "galmig").await;
        let (_, database) = first.rsplit_once('/').unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(urls.len()));
        let tasks: Vec<_> = urls
            .iter()
            .map(|url| {
                let (base, _) = url.rsplit_once('/').unwrap();
                let url = format!("{base}/{database}");
                let start = start.clone();
                tokio::spawn(async move {
                    let store = galera_store(&url).await;
                    start.wait().await;
                    store.migrate().await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let store = galera_store(&first).await;
        let history: Vec<(i64, bool)> =
            sqlx::query_as("SELECT version, success FROM idem_sqlx_migrations ORDER BY version")
                .fetch_all(store.pool())
                .await
                .unwrap();
        assert!(
            !history.is_empty() && history.iter().all(|(_, done)| *done),
            "{history:?}"
        );
        // Usable from every node.
        let key = unique_key("migrated");
        assert!(matches!(
            store.claim(&req(&key, hash("a"))).await.unwrap(),
            Claim::Acquired(_)
        ));
    }
}

/// An old holder's completion through one node races a takeover of its ended lease through
/// another, at once: the two writes of one row on two nodes are certified in one order, and
/// the loser's is rolled back (1213) and sent again, fenced. Exactly one of them wins each
/// round: the completion stored and replayed to the taker, or the takeover (same operation id)
/// and the completion fenced out; never both, never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_and_a_takeover_on_two_nodes_have_one_winner() {
    let Some(urls) = galera_urls() else { return };
    // One manual clock for both nodes' stores: the lease ends for both at once.
    let clock = Arc::new(idem_runtime::store::ManualClock::new(
        idem_runtime::store::SystemClock.now(),
    ));
    let mut nodes: Vec<Arc<dyn Store>> = Vec::new();
    for url in &urls[..2] {
        let store = galera_store(url).await.with_clock(clock.clone());
        store.migrate().await.unwrap();
        nodes.push(Arc::new(store));
    }
    let lease = Duration::from_secs(5);
    let (mut completed_first, mut taken_over_first) = (0, 0);
    for round in 0..40 {
        let key = Arc::new(unique_key("galera-takeover"));
        let h = hash("a");
        let (holder, taker) = (nodes[round % 2].clone(), nodes[(round + 1) % 2].clone());
        let Claim::Acquired(old) = holder
            .claim(&ClaimRequest::new(&key, h, lease, TTL))
            .await
            .unwrap()
        else {
            panic!("round {round}: a fresh key not acquired");
        };
        clock.advance(lease + Duration::from_secs(1));
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let completing = {
            let (holder, start, old) = (holder.clone(), start.clone(), old.clone());
            tokio::spawn(async move {
                start.wait().await;
                let late = Completion::new(Outcome::Completed, 201, b"old".to_vec());
                holder.complete(&old, &late).await
            })
        };
        let claiming = {
            let (taker, start, key) = (taker.clone(), start.clone(), key.clone());
            tokio::spawn(async move {
                start.wait().await;
                taker.claim(&ClaimRequest::new(&key, h, lease, TTL)).await
            })
        };
        let (completed, claimed) = (completing.await.unwrap(), claiming.await.unwrap().unwrap());
        let stored = match (completed, claimed) {
            (Ok(()), Claim::Completed(rec)) => {
                completed_first += 1;
                assert_eq!(rec.fence, old.fence);
                b"old".to_vec()
            }
            (Err(idem_runtime::store::StoreError::FencedOut { .. }), Claim::Acquired(new)) => {
                taken_over_first += 1;
                assert!(new.took_over);
                assert_eq!(new.operation_id, old.operation_id);
                let mine = Completion::new(Outcome::Completed, 201, b"new".to_vec());
                taker.complete(&new, &mine).await.unwrap();
                b"new".to_vec()
            }
            (completed, claimed) => panic!(
                "round {round}: two results or none: complete {completed:?}, claim {claimed:?}"
            ),
        };
        for node in &nodes {
            let rec = node.get(&key).await.unwrap().unwrap();
            assert_eq!(rec.body, stored, "round {round}");
        }
    }
    eprintln!("galera: completion first {completed_first}, takeover first {taken_over_first}");
}
