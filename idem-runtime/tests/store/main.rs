//! The store suite against every backend: memory, SQLite (a file in a temporary directory),
//! PostgreSQL, MariaDB, Redis and a Redis Cluster (servers started by `scripts/test`, URLs in
//! `IDEM_TEST_POSTGRES_URL` / `IDEM_TEST_MYSQL_URL` / `IDEM_TEST_REDIS_URL` /
//! `IDEM_TEST_REDIS_CLUSTER_URL`). Tests use unique keys so that they run in parallel on one
//! server.

mod backends;
mod faults;
mod galera_cluster;
mod proxy;
mod replicas;
mod skew;
mod suite;
mod support;

/// Instantiates every test of [`suite`] for one backend; `$make` builds a fresh
/// [`support::Fixture`] whose clock starts at the given time (or `None` to skip), `$private`
/// one whose records no other test sees (a database of its own on the servers), for the tests
/// that count what a purge deletes (none for a store that purges by the server's own expiry).
macro_rules! store_suite {
    ($backend:ident, $make:path, $private:path) => {
        mod $backend {
            use idem_runtime::store::{Clock, SystemClock};

            store_suite!(@common $make);
            store_suite!(@tests $private, SystemClock.now(), purge_in_batches, purge_frees_remembered_responses,);
        }
    };
    // A store whose server purges by its own expiry: no purge to count.
    ($backend:ident, $make:path) => {
        mod $backend {
            use idem_runtime::store::{Clock, SystemClock};

            store_suite!(@common $make);
        }
    };
    (@common $make:path) => {
        store_suite!(@tests $make, SystemClock.now(),
            first_claim,
            ttl_beyond_what_a_store_counts,
            takeover_writes_the_takers_readable_key,
            duplicate_while_processing,
            complete_then_replay_byte_identical,
            release_then_reclaim,
            ttl_expiry_then_fresh_claim,
            expired_lease_takeover,
            zombie_complete_rejected,
            extend_lease,
            race_256_claims_one_winner,
            body_of_one_mib,
            unicode_keys_of_255_characters,
            object_safe_and_clock,
            concurrent_takeovers_one_winner,
            takeover_races_old_holders_completion,
            abandon_then_immediate_takeover,
            completion_past_expire_at_accepted,
            completion_retried_after_lost_ack,
            remembered_past_the_ttl,
            remembered_attempt_without_a_result_goes_on,
            remembered_completion_expiring_at_once,
        );
    };
    (@tests $make:path, $start:expr, $($test:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $test() {
                let Some(fixture) = $make($start).await else { return };
                crate::suite::$test(&fixture).await;
            }
        )*
    };
}

store_suite!(memory, crate::support::memory, crate::support::memory);
store_suite!(sqlite, crate::support::sqlite, crate::support::sqlite);
store_suite!(
    postgres,
    crate::support::postgres,
    crate::support::postgres_private
);
store_suite!(mysql, crate::support::mysql, crate::support::mysql_private);
// The same store on a node of a 3-node Galera cluster (multi-primary).
store_suite!(
    galera,
    crate::support::galera,
    crate::support::galera_private
);
store_suite!(
    mysql_returning,
    crate::support::mysql_returning,
    crate::support::mysql_returning_private
);
// Every Redis fixture has a key prefix of its own: private already.
store_suite!(redis, crate::support::redis, crate::support::redis);
// Redis deletes a cluster's records by itself (`backends::redis_cluster_expiry_is_the_purge`).
store_suite!(redis_cluster, crate::support::redis_cluster);
