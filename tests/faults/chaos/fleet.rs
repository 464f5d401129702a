//! Processes of `examples/payments` on one database: started, killed with `SIGKILL`, restarted
//! on the same port, frozen with `SIGSTOP` and thawed with `SIGCONT`; every child is killed when
//! the [`Fleet`] is dropped, also when a test panics. And the database they share: a fresh
//! database on the test server for every run, read directly for the final checks.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::client::{self, Failure};
pub use crate::backends::{Backend, Database};

/// How long a process may take to answer its first request.
const STARTUP: Duration = Duration::from_secs(60);

/// A row of the idempotency table.
#[derive(Debug, Clone)]
pub struct RecordRow {
    /// The client's key (the readable key's last part).
    pub client_key: String,
    pub operation_id: String,
    /// 0 processing, 1 completed, 2 failed-but-stored.
    pub state: i64,
    pub fence: i64,
    /// Milliseconds since its current lease was claimed (`locked_at`), by the database's clock
    /// when it was read.
    pub lease_age_ms: i64,
}

/// A row of `payments`.
#[derive(Debug, Clone)]
pub struct PaymentRow {
    pub payment_id: String,
    pub operation_id: String,
    pub order_id: String,
}

/// What the final checks read of a [`Database`] the processes shared.
impl Database {
    /// A pool on a MariaDB database; on a Galera cluster its reads are causal, so that they see
    /// what the processes wrote through the other nodes.
    async fn mysql_pool(&self) -> sqlx::MySqlPool {
        let options = sqlx::mysql::MySqlPoolOptions::new();
        let options = if self.nodes.is_empty() {
            options
        } else {
            options.after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::Executor::execute(conn, "SET SESSION wsrep_sync_wait = 1").await?;
                    Ok(())
                })
            })
        };
        options.connect(&self.url).await.unwrap()
    }

    /// Every idempotency record.
    pub async fn records(&self) -> Vec<RecordRow> {
        type Row = (String, String, i64, i64, i64);
        let rows: Vec<Row> = match self.backend {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url).await.unwrap();
                let rows = sqlx::query_as(
                    "SELECT idem_key, operation_id, state, fence, \
                     CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER) - locked_at \
                     FROM idem_idempotency_records",
                )
                .fetch_all(&pool)
                .await
                .unwrap();
                pool.close().await;
                rows
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
                let rows = sqlx::query_as(
                    "SELECT idem_key, operation_id, state::BIGINT, fence, \
                     floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint - locked_at \
                     FROM idem.idempotency_records",
                )
                .fetch_all(&pool)
                .await
                .unwrap();
                pool.close().await;
                rows
            }
            Backend::Mysql => {
                let pool = self.mysql_pool().await;
                let rows = sqlx::query_as(
                    "SELECT idem_key, operation_id, CAST(state AS SIGNED), fence, \
                     CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000 \
                     AS SIGNED) - CAST(locked_at AS SIGNED) \
                     FROM idem_idempotency_records",
                )
                .fetch_all(&pool)
                .await
                .unwrap();
                pool.close().await;
                rows
            }
            Backend::Memory | Backend::Redis => unreachable!("no database"),
        };
        rows.into_iter()
            .map(
                |(key, operation_id, state, fence, lease_age_ms)| RecordRow {
                    client_key: key.rsplit(':').next().unwrap_or(&key).to_owned(),
                    operation_id,
                    state,
                    fence,
                    lease_age_ms,
                },
            )
            .collect()
    }

    /// The record of client key `key`, if any.
    pub async fn record(&self, key: &str) -> Option<RecordRow> {
        self.records()
            .await
            .into_iter()
            .find(|r| r.client_key == key)
    }

    /// Every row of `payments`.
    pub async fn payments(&self) -> Vec<PaymentRow> {
        const SQL: &str = "SELECT payment_id, operation_id, order_id FROM payments";
        type Row = (String, String, String);
        let rows: Vec<Row> = match self.backend {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url).await.unwrap();
                let rows = sqlx::query_as(SQL).fetch_all(&pool).await.unwrap();
                pool.close().await;
                rows
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
                let rows = sqlx::query_as(SQL).fetch_all(&pool).await.unwrap();
                pool.close().await;
                rows
            }
            Backend::Mysql => {
                let pool = self.mysql_pool().await;
                let rows = sqlx::query_as(SQL).fetch_all(&pool).await.unwrap();
                pool.close().await;
                rows
            }
            Backend::Memory | Backend::Redis => unreachable!("no database"),
        };
        rows.into_iter()
            .map(|(payment_id, operation_id, order_id)| PaymentRow {
                payment_id,
                operation_id,
                order_id,
            })
            .collect()
    }
}

/// The example binary, built by `cargo test` next to the test binaries:
/// `target/<profile>/examples/payments`.
fn example_binary() -> PathBuf {
    example("payments")
}

/// The binary of the example `name`, built by `cargo test` next to the test binaries:
/// `target/<profile>/examples/<name>`.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    let bin = profile_dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} is missing: `cargo test --workspace --all-features` builds it \
         (or `cargo build --all-features --example {name}`)",
        bin.display()
    );
    bin
}

struct Proc {
    addr: SocketAddr,
    child: Option<Child>,
    /// Starts so far (for the log file's name).
    starts: u32,
}

/// Processes of the example sharing one database.
pub struct Fleet {
    bin: PathBuf,
    env: Vec<(String, String)>,
    /// On a multi-primary cluster, the database's URL on each node: process `i` talks to node
    /// `i` modulo their number.
    nodes: Vec<String>,
    procs: Mutex<Vec<Proc>>,
    logs: tempfile::TempDir,
}

impl Fleet {
    /// Starts `n` processes on `db` with the extra environment `env`, and waits until each
    /// answers.
    pub async fn start(db: &Database, n: usize, env: &[(&str, String)]) -> Fleet {
        let mut vars = vec![("DATABASE_URL".to_owned(), db.url.clone())];
        vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        let procs = (0..n)
            .map(|_| Proc {
                addr: free_addr(),
                child: None,
                starts: 0,
            })
            .collect();
        let fleet = Fleet {
            bin: example_binary(),
            env: vars,
            nodes: db.nodes.clone(),
            procs: Mutex::new(procs),
            logs: tempfile::tempdir().unwrap(),
        };
        for i in 0..n {
            fleet.spawn(i);
        }
        for i in 0..n {
            fleet.ready(i).await;
        }
        fleet
    }

    pub fn len(&self) -> usize {
        self.procs.lock().unwrap().len()
    }

    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.procs.lock().unwrap().iter().map(|p| p.addr).collect()
    }

    /// Starts process `i` (not running) without waiting for it to answer.
    pub fn spawn(&self, i: usize) {
        let mut procs = self.procs.lock().unwrap();
        let p = &mut procs[i];
        assert!(p.child.is_none(), "process {i} runs already");
        p.starts += 1;
        let log = self.logs.path().join(format!("p{i}.{}.log", p.starts));
        let log = std::fs::File::create(log).unwrap();
        // Killed on drop; and with util-linux's `setpriv`, also when this test process dies
        // without unwinding (SIGKILL, a CI timeout): the kernel sends the child SIGKILL when the
        // thread that spawned it (a runtime worker, alive as long as the test) exits.
        let mut command = match setpriv() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        if !self.nodes.is_empty() {
            command.env("DATABASE_URL", &self.nodes[i % self.nodes.len()]);
        }
        let child = command
            .env("PAYMENTS_ADDR", p.addr.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", self.bin.display()));
        p.child = Some(child);
    }

    /// Waits until process `i` answers `GET /v1/stats`.
    async fn ready(&self, i: usize) {
        let addr = self.procs.lock().unwrap()[i].addr;
        let started = Instant::now();
        let raw = client::request("GET", "/v1/stats", &[], None);
        loop {
            match client::exchange(addr, &raw, Duration::from_secs(2)).await {
                Ok(r) if r.status == 200 => return,
                Ok(_) | Err(Failure::Connect(_) | Failure::Broken(_) | Failure::Timeout) => {}
            }
            let exited = {
                let mut procs = self.procs.lock().unwrap();
                let child = procs[i].child.as_mut().expect("started");
                child.try_wait().unwrap()
            };
            if let Some(status) = exited {
                panic!(
                    "process {i} exited ({status}) while starting:\n{}",
                    self.log(i)
                );
            }
            assert!(
                started.elapsed() < STARTUP,
                "process {i} did not answer within {STARTUP:?}:\n{}",
                self.log(i)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last log of process `i`.
    pub fn log(&self, i: usize) -> String {
        let starts = self.procs.lock().unwrap()[i].starts;
        let path = self.logs.path().join(format!("p{i}.{starts}.log"));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// `SIGKILL`s process `i` and reaps it.
    pub fn kill(&self, i: usize) {
        let child = self.procs.lock().unwrap()[i].child.take();
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts process `i` again, on its port, and waits until it answers.
    pub async fn restart(&self, i: usize) {
        self.spawn(i);
        self.ready(i).await;
    }

    /// Sends `signal` (`STOP`, `CONT`) to process `i`.
    pub fn signal(&self, i: usize, signal: &str) {
        let (pid, exited) = {
            let mut procs = self.procs.lock().unwrap();
            let child = procs[i].child.as_mut().expect("running");
            (child.id(), child.try_wait().unwrap())
        };
        if let Some(status) = exited {
            panic!("process {i} exited by itself ({status}):\n{}", self.log(i));
        }
        // The shell's builtin: no procps needed.
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{signal} {pid}"))
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Panics if a process exited by itself (a crash, not one of our kills).
    pub fn assert_alive(&self) {
        let n = self.len();
        for i in 0..n {
            let exited = {
                let mut procs = self.procs.lock().unwrap();
                procs[i].child.as_mut().map(|c| c.try_wait().unwrap())
            };
            if let Some(Some(status)) = exited {
                panic!("process {i} exited by itself ({status}):\n{}", self.log(i));
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let procs = self.procs.get_mut().unwrap_or_else(|p| p.into_inner());
        for p in procs.iter_mut() {
            if let Some(mut child) = p.child.take() {
                // SIGKILL also ends a stopped process.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// util-linux's `setpriv`, if installed.
fn setpriv() -> Option<&'static str> {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

/// A loopback address with a free port (the process binds it a moment later).
fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}
