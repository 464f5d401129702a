//! What the payments servers (axum's `examples/payments.rs`, actix-web's
//! `examples/payments_actix.rs`, tonic's `examples/payments_grpc.rs`) read and open alike: the
//! timing knobs, the outcome policy, and the store and business tables named by `DATABASE_URL`.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use idem::seal::KeyRing;
use idem::store::{Chain, Store, StoreError, Unreachable, masked_url};
use idem::{Contract, DefaultPolicy, Disposition, Idem, OutcomePolicy};
use metrics_exporter_prometheus::PrometheusHandle;

use super::db::Db;
use super::model::{self, App};

/// A boxed error.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// Timing knobs of the example.
#[derive(Clone, Debug)]
pub struct Config {
    /// Processing time added inside payment creation (`PAYMENTS_DELAY_MS`).
    pub delay: Duration,
    /// How long a refund stays `pending` (`PAYMENTS_SETTLE_MS`).
    pub settle: Duration,
    /// The longest idem waits for one answer of the store (`PAYMENTS_STORE_TIMEOUT_MS`; idem's
    /// default, 2 s, when `None`).
    pub store_timeout: Option<Duration>,
    /// The keys that encrypt stored responses (`PAYMENTS_ENCRYPTION_KEYS`: `ID:BASE64,..`, the
    /// first the primary); `None`: stored in the clear.
    pub encryption: Option<KeyRing>,
    /// The origins whose scripts may call the HTTP API from a browser (`PAYMENTS_CORS_ORIGINS`,
    /// comma-separated, each `scheme://host[:port]`); empty: no CORS middleware, and browsers
    /// refuse cross-origin calls. The gRPC server has no use for it.
    pub cors_origins: Vec<String>,
    /// The Prometheus recorder whose series the HTTP servers' `GET /metrics` renders; `None`:
    /// the first app of the process installs one as the process's recorder, and every app
    /// shares it. A process with a recorder of its own passes the handle of the Prometheus one.
    pub metrics: Option<PrometheusHandle>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            delay: Duration::ZERO,
            settle: Duration::from_millis(500),
            store_timeout: None,
            encryption: None,
            cors_origins: Vec::new(),
            metrics: None,
        }
    }
}

impl Config {
    /// Reads `PAYMENTS_DELAY_MS`, `PAYMENTS_SETTLE_MS`, `PAYMENTS_STORE_TIMEOUT_MS` (defaults:
    /// 0, 500 and idem's), `PAYMENTS_ENCRYPTION_KEYS` and `PAYMENTS_CORS_ORIGINS` (default:
    /// none).
    pub fn from_env() -> Result<Self, BoxError> {
        let ms = |name: &str, default: Duration| -> Result<Duration, BoxError> {
            match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => v
                    .trim()
                    .parse()
                    .map(Duration::from_millis)
                    .map_err(|e| format!("{name}={v:?}: {e}").into()),
                _ => Ok(default),
            }
        };
        let default = Config::default();
        Ok(Config {
            delay: ms("PAYMENTS_DELAY_MS", default.delay)?,
            settle: ms("PAYMENTS_SETTLE_MS", default.settle)?,
            store_timeout: match std::env::var("PAYMENTS_STORE_TIMEOUT_MS") {
                Ok(v) if !v.trim().is_empty() => {
                    Some(ms("PAYMENTS_STORE_TIMEOUT_MS", default.settle)?)
                }
                _ => None,
            },
            encryption: match std::env::var("PAYMENTS_ENCRYPTION_KEYS") {
                Ok(v) if !v.trim().is_empty() => {
                    Some(KeyRing::parse(&v).map_err(|e| format!("PAYMENTS_ENCRYPTION_KEYS: {e}"))?)
                }
                _ => None,
            },
            cors_origins: match std::env::var("PAYMENTS_CORS_ORIGINS") {
                Ok(v) => origins(&v).map_err(|e| format!("PAYMENTS_CORS_ORIGINS: {e}"))?,
                Err(_) => Vec::new(),
            },
            metrics: None,
        })
    }

    pub(crate) fn settle_ms(&self) -> i64 {
        i64::try_from(self.settle.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The origins of a comma-separated list, each `scheme://host[:port]` as a browser sends it in
/// `Origin` (no path, no trailing slash); blanks between commas are skipped.
fn origins(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for origin in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let well_formed = origin.split_once("://").is_some_and(|(scheme, host)| {
            !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
                && !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !b"/?#@,".contains(&b))
        });
        if !well_formed {
            return Err(format!(
                "{origin:?} is not an origin (scheme://host[:port], e.g. https://shop.example)"
            ));
        }
        out.push(origin.to_owned());
    }
    Ok(out)
}

/// The default policy, except that a `503` (our own database failed) is never final: the record
/// is abandoned, and a retry with the same key runs again under the **same** operation id. Not
/// released: the failed write may have committed after all (its acknowledgement lost), and only
/// the operation id, on which the business tables are unique, makes the retry find it instead of
/// charging again. (Under `exact_replay` the default stores every other 5xx, like the simulated
/// processor `500`.)
#[derive(Debug)]
struct RetryDatabaseErrors;

impl OutcomePolicy for RetryDatabaseErrors {
    fn classify(&self, contract: Contract, status: u16) -> Disposition {
        match status {
            503 => Disposition::Abandon,
            _ => DefaultPolicy.classify(contract, status),
        }
    }
}

/// Opens the store named by `database_url` (a SQLite file path or one of sqlx's SQLite URLs,
/// `sqlite://path?mode=rwc` say, `postgres://..`, `mysql://..`), runs its migrations, creates the business tables in the same
/// database, and returns the application's state.
pub async fn open(database_url: &str, config: Config) -> Result<App, BoxError> {
    let (store, db): (Arc<dyn Store>, Db) = if is_url(database_url, &["postgres", "postgresql"]) {
        postgres(database_url).await?
    } else if is_url(database_url, &["mysql", "mariadb"]) {
        mysql(database_url).await?
    } else {
        // A path, or any of sqlx's SQLite URLs (`sqlite://path?mode=rwc`, `sqlite::memory:`).
        let store = idem::SqliteStore::connect(database_url)
            .await
            .map_err(unreachable(database_url))?;
        let db = Db::Sqlite(store.pool().clone());
        (Arc::new(store), db)
    };
    let setting_up = |e: &(dyn Error + 'static)| {
        format!(
            "cannot create the tables in the database at {}: {} (check that DATABASE_URL's \
             user may create tables)",
            masked_url(database_url),
            one_line(e)
        )
    };
    store.migrate().await.map_err(|e| setting_up(&e))?;
    db.create_tables().await.map_err(|e| setting_up(&e))?;
    // idem's problem documents under the service's own base, next to its own errors.
    let mut idem = Idem::from_arc(store)
        .with_policy(RetryDatabaseErrors)
        .with_problem_base(model::PROBLEMS);
    if let Some(wait) = config.store_timeout {
        idem = idem.with_store_timeout(wait);
    }
    if let Some(ring) = config.encryption.clone() {
        idem = idem.with_encryption(ring);
    }
    Ok(App { idem, db, config })
}

/// The one line of a connection that failed at start-up: what, why, and what to check.
fn unreachable(url: &str) -> impl FnOnce(StoreError) -> BoxError + '_ {
    move |e| {
        Unreachable {
            url,
            error: &e,
            setting: "DATABASE_URL",
        }
        .to_string()
        .into()
    }
}

/// `e` and its causes on one line.
fn one_line(e: &(dyn Error + 'static)) -> String {
    Chain(e).to_string().replace('\n', " ")
}

/// The one line of an address the server cannot listen on: why, and what to do.
pub fn cannot_listen(addr: &str, e: &std::io::Error) -> BoxError {
    use std::io::ErrorKind;
    let (cause, hint) = match e.kind() {
        ErrorKind::AddrInUse => (
            "address in use".to_owned(),
            "stop the other server or set PAYMENTS_ADDR=host:port",
        ),
        ErrorKind::AddrNotAvailable => (
            "no such address on this machine".to_owned(),
            "set PAYMENTS_ADDR to one of its addresses, e.g. 127.0.0.1:PORT",
        ),
        ErrorKind::PermissionDenied => (
            "permission denied".to_owned(),
            "take a port above 1023 in PAYMENTS_ADDR",
        ),
        _ => (e.to_string(), "set PAYMENTS_ADDR=host:port"),
    };
    format!("cannot listen on {addr}: {cause} ({hint})").into()
}

/// What `main` returns: success, or the start-up failure `result` holds printed as one line on
/// standard error (`error: ...`) and exit code 1.
pub fn exit_code(result: Result<(), BoxError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&*e));
            ExitCode::FAILURE
        }
    }
}

/// `PAYMENTS_ADDR` (default `default_addr`: `127.0.0.1:3000` for HTTP) and `DATABASE_URL`
/// (default `payments.db`), and the logging of `PAYMENTS_LOG` (default `warn`) installed.
pub fn from_env(default_addr: &str) -> Result<(String, String, Config), BoxError> {
    let addr = std::env::var("PAYMENTS_ADDR").unwrap_or_else(|_| default_addr.to_owned());
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "payments.db".to_owned());
    let config = Config::from_env()?;
    let level = match std::env::var("PAYMENTS_LOG") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<tracing::Level>()
            .map_err(|e| format!("PAYMENTS_LOG={v:?}: {e} (error, warn, info, debug or trace)"))?,
        _ => tracing::Level::WARN,
    };
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .init();
    Ok((addr, url, config))
}

/// What the startup line names the store by: the URL's scheme, or the SQLite path.
pub fn store_name(url: &str) -> &str {
    url.split("://")
        .next()
        .filter(|_| url.contains("://"))
        .unwrap_or(url)
}

fn is_url(url: &str, schemes: &[&str]) -> bool {
    schemes.iter().any(|s| {
        url.strip_prefix(s)
            .is_some_and(|rest| rest.starts_with("://"))
    })
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    let store = idem::PostgresStore::connect(url)
        .await
        .map_err(unreachable(url))?;
    let db = Db::Postgres(store.pool().clone());
    Ok((Arc::new(store), db))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    Err("a postgres:// DATABASE_URL needs `--features postgres`".into())
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    let store = idem::MySqlStore::connect(url)
        .await
        .map_err(unreachable(url))?;
    let db = Db::MySql(store.pool().clone());
    Ok((Arc::new(store), db))
}

#[cfg(not(feature = "mysql"))]
async fn mysql(_: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    Err("a mysql:// DATABASE_URL needs `--features mysql`".into())
}
