//! The store suite against every backend: memory, SQLite (a file in a temporary directory),
//! PostgreSQL and MariaDB (servers started by `scripts/test`, URLs in `IDEM_TEST_POSTGRES_URL` /
//! `IDEM_TEST_MYSQL_URL`). Tests use unique keys so that they run in parallel on one server.

mod backends;
mod suite;
mod support;

/// Instantiates every test of [`suite`] for one backend; `$make` builds a fresh
/// [`support::Fixture`] whose clock starts at the given time (or `None` to skip).
macro_rules! store_suite {
    ($backend:ident, $make:path) => {
        mod $backend {
            use idem_runtime::store::{Clock, SystemClock};

            store_suite!(@tests $make, SystemClock.now(),
                first_claim,
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
            );
            store_suite!(@tests $make, crate::suite::PURGE_EPOCH, purge_in_batches,);
        }
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

store_suite!(memory, crate::support::memory);
store_suite!(sqlite, crate::support::sqlite);
store_suite!(postgres, crate::support::postgres);
store_suite!(mysql, crate::support::mysql);
