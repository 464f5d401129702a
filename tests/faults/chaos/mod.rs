//! A bad day with several processes: `examples/payments` run as real processes (the binary
//! `cargo test` builds next to this one, `target/<profile>/examples/payments`, with
//! `--all-features` for PostgreSQL and MariaDB) on one database, spoken to over TCP by clients
//! that retry as real clients do, while processes are killed, frozen and thawed.
//!
//! 1. `kills_*`: processes killed with `SIGKILL` and restarted at random (sometimes killed again
//!    while they start), and one frozen past its lease and thawed, while a crowd of clients sends
//!    hundreds of keys, half of them duplicated ([`crowd`]); on PostgreSQL, MariaDB, and one
//!    SQLite file.
//! 2. `hang_ups_*`: the same, with clients that hang up before, during and after the handler's
//!    effect and retry later.
//! 3. `zombie_holder`: a holder frozen past its lease with `SIGSTOP`, taken over, thawed with
//!    `SIGCONT` ([`zombie`]).
//! 4. `storm_*`: a thousand concurrent requests with one key and one body ([`storm`]).
//! 5. `clients_*`: `examples/pay_client` through a proxy that breaks connections at random,
//!    with processes killed and restarted ([`clients`]).
//! 6. `failover_*`: the store's primary killed under load and its replica promoted, on
//!    PostgreSQL (a streaming standby) and a Redis Cluster, with durable acknowledgement (the
//!    promise must hold) and without (the losses are measured); a node of a MariaDB Galera
//!    cluster killed, or split off, under load ([`failover`]).
//!
//! Each prints its tally to stderr, past the test harness's capture. The short form runs in
//! `scripts/test`; `scripts/chaos --long` (or the variables below) runs the long one:
//!
//! | variable | short form | |
//! |---|---|---|
//! | `IDEM_CHAOS_SECONDS` | `8` | how long processes are killed (and duplicates sent) in items 1 and 2; a fifth of it (at least 1.5 s) is item 6's load before the kill and after recovery |
//! | `IDEM_CHAOS_KEYS` | `240` | keys per run of items 1 and 2 |
//! | `IDEM_CHAOS_PROCESSES` | `3` | processes per run of items 1 and 2 |
//! | `IDEM_CHAOS_CLIENTS` | `32` | concurrent clients in items 1 and 2, twice those of item 6 |
//! | `IDEM_CHAOS_STORM` | `1000` | requests per storm |
//! | `IDEM_CHAOS_PAYMENTS` | `1000` | payments per run of item 5 |
//! | `IDEM_CHAOS_SEED` | the clock | the seed of every random choice (printed) |
//!
//! The tests run one at a time (`SERIAL`, shared with `bad_day`): each wants the machine's two
//! cores for itself.
//! Children are killed when a test ends, also when it fails.

use std::io::Write as _;

mod client;
mod clients;
mod crowd;
mod failover;
mod fleet;
mod rng;
mod storm;
mod zombie;

use crate::backends::{Backend, backends};

/// One test at a time, and no test of `bad_day` meanwhile.
use crate::SERIAL;

/// The sizes of a run, from the environment.
#[derive(Debug, Clone)]
pub struct Knobs {
    /// `IDEM_CHAOS_SECONDS`.
    pub seconds: u64,
    /// `IDEM_CHAOS_KEYS`.
    pub keys: usize,
    /// `IDEM_CHAOS_PROCESSES`.
    pub processes: usize,
    /// `IDEM_CHAOS_CLIENTS`.
    pub clients: usize,
    /// `IDEM_CHAOS_STORM`.
    pub storm: usize,
    /// `IDEM_CHAOS_PAYMENTS`.
    pub payments: usize,
}

impl Knobs {
    fn from_env() -> Knobs {
        fn var(name: &str, default: usize) -> usize {
            match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => v
                    .trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("{name}={v:?}: {e}")),
                _ => default,
            }
        }
        Knobs {
            seconds: var("IDEM_CHAOS_SECONDS", 8) as u64,
            keys: var("IDEM_CHAOS_KEYS", 240).max(2),
            processes: var("IDEM_CHAOS_PROCESSES", 3).max(1),
            clients: var("IDEM_CHAOS_CLIENTS", 32).max(1),
            storm: var("IDEM_CHAOS_STORM", 1000).max(2),
            payments: var("IDEM_CHAOS_PAYMENTS", 1000).max(1),
        }
    }
}

/// Prints `line` to stderr directly, so that it shows although the harness captures output.
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "[chaos] {line}");
}

// ---------------------------------------------------------------- 1. SIGKILL

/// The handler sleeps this long before its effect in item 1, so that kills land inside it.
const KILLS_DELAY_MS: u64 = 150;

fn kills(backend: Backend) -> crowd::Plan {
    crowd::Plan {
        name: "kills",
        backend,
        delay_ms: KILLS_DELAY_MS,
        kills: true,
        freezes: true,
        hang_ups: 0.0,
    }
}

/// The embedded default shared by several processes on one host (one SQLite file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_sqlite() {
    let _serial = SERIAL.lock().await;
    crowd::run(kills(Backend::Sqlite), &Knobs::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_postgres() {
    let _serial = SERIAL.lock().await;
    crowd::run(kills(Backend::Postgres), &Knobs::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_mariadb() {
    let _serial = SERIAL.lock().await;
    crowd::run(kills(Backend::Mysql), &Knobs::from_env()).await;
}

// ---------------------------------------------------------------- 2. clients that hang up

/// A slow handler, so that hang-ups land before, during and after its effect.
const HANG_UPS_DELAY_MS: u64 = 300;

fn hang_ups(backend: Backend) -> crowd::Plan {
    crowd::Plan {
        name: "hang-ups",
        backend,
        delay_ms: HANG_UPS_DELAY_MS,
        kills: true,
        freezes: true,
        hang_ups: 0.35,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_ups_postgres() {
    let _serial = SERIAL.lock().await;
    crowd::run(hang_ups(Backend::Postgres), &Knobs::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_ups_mariadb() {
    let _serial = SERIAL.lock().await;
    crowd::run(hang_ups(Backend::Mysql), &Knobs::from_env()).await;
}

/// The same on a 3-node MariaDB Galera cluster, each process on its own node: a retry often
/// lands on another node than its first attempt, and the nodes certify each other's writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_ups_galera() {
    let _serial = SERIAL.lock().await;
    let Some(db) = crate::backends::Database::on_galera().await else {
        return;
    };
    let plan = crowd::Plan {
        name: "hang-ups, one process per Galera node",
        ..hang_ups(Backend::Mysql)
    };
    crowd::run_on(plan, db, &Knobs::from_env()).await;
}

// ---------------------------------------------------------------- 3. the zombie holder

/// Both wake points on every backend at once (each mostly waits for a lease to run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_holder() {
    let _serial = SERIAL.lock().await;
    let mut runs = Vec::new();
    for backend in backends().into_iter().filter(|b| b.has_database()) {
        for wake in [
            zombie::Wake::AfterTheRetryStored,
            zombie::Wake::BeforeTheRetryWrites,
        ] {
            runs.push(tokio::spawn(zombie::zombie(backend, wake)));
        }
    }
    for run in runs {
        run.await.unwrap();
    }
}

// ---------------------------------------------------------------- 4. storms

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_memory() {
    let _serial = SERIAL.lock().await;
    storm::memory(Knobs::from_env().storm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_sqlite() {
    let _serial = SERIAL.lock().await;
    storm::through_the_example(Backend::Sqlite, Knobs::from_env().storm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_postgres() {
    let _serial = SERIAL.lock().await;
    storm::through_the_example(Backend::Postgres, Knobs::from_env().storm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_mariadb() {
    let _serial = SERIAL.lock().await;
    storm::through_the_example(Backend::Mysql, Knobs::from_env().storm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_galera() {
    let _serial = SERIAL.lock().await;
    storm::across_galera_nodes(Knobs::from_env().storm).await;
}

// ---------------------------------------------------------------- 5. clients through faults

/// One process on the embedded default, killed and restarted: the client waits it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sqlite() {
    let _serial = SERIAL.lock().await;
    clients::through_a_fault_proxy(Backend::Sqlite, 1, Knobs::from_env().payments).await;
}

/// Several processes on PostgreSQL: a retry lands on another process than its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_postgres() {
    let _serial = SERIAL.lock().await;
    let knobs = Knobs::from_env();
    clients::through_a_fault_proxy(Backend::Postgres, knobs.processes, knobs.payments).await;
}

// ---------------------------------------------------------------- 6. failover

/// A synchronous standby: every key one payment, through the kill and the promotion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_postgres_synchronous() {
    let _serial = SERIAL.lock().await;
    failover::postgres(true, failover::Shape::of(&Knobs::from_env())).await;
}

/// An asynchronous standby (PostgreSQL's default): the losses, measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_postgres_asynchronous() {
    let _serial = SERIAL.lock().await;
    failover::postgres(false, failover::Shape::of(&Knobs::from_env())).await;
}

/// `WAIT 1` after every claim and completion: every key one payment, through the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_redis_cluster_acks() {
    let _serial = SERIAL.lock().await;
    failover::redis_cluster(true, failover::Shape::of(&Knobs::from_env())).await;
}

/// Redis's asynchronous replication (its default): the losses, measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_redis_cluster_asynchronous() {
    let _serial = SERIAL.lock().await;
    failover::redis_cluster(false, failover::Shape::of(&Knobs::from_env())).await;
}

/// A Galera node killed under load and restarted: its process answers `503` meanwhile, the
/// others go on; every key one payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_galera_node_killed() {
    let _serial = SERIAL.lock().await;
    let shape = failover::Shape::of(&Knobs::from_env());
    failover::galera(failover::Fault::Kill, shape).await;
}

/// A Galera node split off under load (non-primary): its claims are refused, not run
/// unprotected; let back, it catches up; every key one payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_galera_node_split_off() {
    let _serial = SERIAL.lock().await;
    let shape = failover::Shape::of(&Knobs::from_env());
    failover::galera(failover::Fault::Split, shape).await;
}
