//! The tests that take the database servers or the whole machine away from everything else,
//! apart from `tests/it` in a binary of their own:
//!
//! - [`bad_day`] stalls the shared PostgreSQL and MariaDB servers and stops them for real
//!   (`IDEM_TEST_{POSTGRES,MYSQL}_{STOP,START}`);
//! - [`chaos`] runs several processes of `examples/payments` on them, kills and freezes them,
//!   and wants the machine's two cores for itself.
//!
//! Cargo runs test binaries one after another, never two at once: while this one runs, no test
//! of `tests/it` (nor of any other binary) uses the servers. Inside it, every test holds
//! [`SERIAL`] from start to end, so at most one of them runs at any moment, whatever
//! `--test-threads` says. A test added here must hold it too.
//!
//! `scripts/chaos` runs the `chaos` tests alone (`cargo test --test faults -- --skip bad_day::`).

mod bad_day;
mod chaos;

// Some of the stores and helpers serve tests/it only.
#[allow(dead_code)]
#[path = "../common/backends.rs"]
mod backends;
#[path = "../common/proxy.rs"]
mod proxy;
#[allow(dead_code)]
#[path = "../common/records.rs"]
mod records;
#[path = "../common/servers.rs"]
mod servers;
#[allow(dead_code)]
#[path = "../common/sql_pool.rs"]
mod sql_pool;

/// One test of this binary at a time: an outage of [`bad_day`] must not meet another test on the
/// same servers, and a test of [`chaos`] wants both cores. A `tokio` mutex: a test that fails
/// while holding it does not poison it for the next.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
