//! A payments API whose write endpoints are idempotent: the flagship example of idem.
//!
//! ```sh
//! cargo run --example payments          # http://127.0.0.1:3000, SQLite file ./payments.db
//! ```
//!
//! | variable | default | |
//! |---|---|---|
//! | `PAYMENTS_ADDR` | `127.0.0.1:3000` | the listening address |
//! | `DATABASE_URL` | `payments.db` | a SQLite file (created if missing; `sqlite://path` too), or `postgres://..` / `mysql://..` (build with `--features postgres` / `mysql`) |
//! | `PAYMENTS_DELAY_MS` | `0` | processing time added inside payment creation |
//! | `PAYMENTS_SETTLE_MS` | `500` | how long a refund stays `pending` |
//! | `PAYMENTS_STORE_TIMEOUT_MS` | `2000` | the longest idem waits for one answer of the store, pool wait included (`Idem::store_timeout`) |
//! | `PAYMENTS_LOG` | `warn` | the most detailed level printed to stderr (`error`, `warn`, `info`, `debug`, `trace`): idem warns when a lease is lost, a result cannot be stored or the store is unavailable |
//!
//! The idempotency records and the business tables (`payments`, `refunds`, `events`, each with a
//! unique constraint on the operation id) live in the same database. A payment is created in
//! idem's atomic mode (`#[idempotent(transaction = tx)]`): its row and the stored response commit
//! in one transaction, so a crash or a cancellation leaves both or neither. Refunds and events
//! use the two-commit mode, where the unique constraint on the operation id keeps a retried
//! operation's row single. `X-Tenant-Id` and
//! `X-User-Id`, both optional, scope the keys: the same key under two tenants is two operations.
//!
//! Amounts are accepted as JSON numbers or decimal strings (`100`, `"100"`, `100.00`,
//! `"100.00"` are the same amount, and the same request) and answered as decimal **strings**
//! with the scale they were sent with (`"amount": "100.00"`), so they are never rounded by a
//! JSON parser on the way back.
//!
//! # Walk-through
//!
//! Create a payment (`exact_replay`, TTL 90 days, lease 10 s):
//!
//! ```sh
//! curl -i localhost:3000/v1/payments -H 'Idempotency-Key: order-42-try' \
//!   -H 'Content-Type: application/json' \
//!   -d '{"amount": "100.00", "currency": "EUR", "customer_id": "cus_1", "order_id": "ord_42"}'
//! # HTTP/1.1 201 Created, Location: /v1/payments/pay_..
//! # {"payment_id":"pay_..","status":"succeeded","amount":"100.00","currency":"EUR",..}
//! ```
//!
//! Send it again — after a timeout, say. Same answer, byte for byte, nothing charged twice:
//! `201` with `Idempotent-Replayed: true`. `"amount": 100` is the same request, and so is one
//! with another `client_ip`, `timestamp` or `signature` (environment fields, not hashed).
//!
//! The same key with another amount is refused: `422`
//! `https://payments.example/problems/key-reused` (`application/problem+json`). A new operation needs a
//! new key.
//!
//! With `PAYMENTS_DELAY_MS=5000`, a duplicate sent while the first request still runs gets `409`
//! `https://payments.example/problems/in-progress` with `Retry-After` (seconds left on the lease).
//!
//! `"currency": "XXX"` simulates a processor failure: `500` problem+json, stored and replayed
//! (`500` again, `Idempotent-Replayed: true`). An invalid request (`amount <= 0`, a currency
//! that is not three capital letters) is a `400` that is **not** stored: the corrected retry
//! with the same key runs. No `Idempotency-Key` header: `400`
//! `https://payments.example/problems/missing-key`.
//!
//! Refund it (`latest_state`, TTL 90 days): the first answer is `201` with `"status":
//! "pending"`; a retry answers `200` with the refund's **current** state — `succeeded` once
//! `PAYMENTS_SETTLE_MS` have passed:
//!
//! ```sh
//! curl -i localhost:3000/v1/payments/pay_../refunds -H 'Idempotency-Key: refund-1' \
//!   -H 'Content-Type: application/json' -d '{"amount": "25.00"}'
//! ```
//!
//! Track an event (`suppress_only`, TTL 6 hours): `202 {"event_id": "evt_.."}`; a duplicate
//! answers `200` with the same `event_id` and records nothing:
//!
//! ```sh
//! curl -i localhost:3000/v1/events -H 'Idempotency-Key: evt-1' \
//!   -H 'Content-Type: application/json' -d '{"name": "checkout.viewed"}'
//! curl localhost:3000/v1/stats   # {"payments":1,"refunds":1,"events":1}
//! ```
//!
//! `GET /v1/payments/{id}` and `GET /v1/refunds/{id}` read them back (`404` problem+json when
//! unknown).

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use idem::{Contract, DefaultPolicy, Disposition, Idem, OutcomePolicy, store::Store};

#[path = "payments/api.rs"]
mod api;
#[path = "payments/db.rs"]
mod db;

use api::App;
use db::Db;

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            delay: Duration::ZERO,
            settle: Duration::from_millis(500),
            store_timeout: None,
        }
    }
}

impl Config {
    /// Reads `PAYMENTS_DELAY_MS`, `PAYMENTS_SETTLE_MS` and `PAYMENTS_STORE_TIMEOUT_MS`
    /// (defaults: 0, 500 and idem's).
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
        })
    }

    fn settle_ms(&self) -> i64 {
        i64::try_from(self.settle.as_millis()).unwrap_or(i64::MAX)
    }
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

/// Opens the store named by `database_url` (a SQLite file path or `sqlite://path`,
/// `postgres://..`, `mysql://..`), runs its migrations, creates the business tables in the same
/// database, and returns the API.
pub async fn app(database_url: &str, config: Config) -> Result<Router, BoxError> {
    let (store, db): (Arc<dyn Store>, Db) = if is_url(database_url, &["postgres", "postgresql"]) {
        postgres(database_url).await?
    } else if is_url(database_url, &["mysql", "mariadb"]) {
        mysql(database_url).await?
    } else {
        let path = database_url
            .strip_prefix("sqlite://")
            .or_else(|| database_url.strip_prefix("sqlite:"))
            .unwrap_or(database_url);
        let store = idem::SqliteStore::open(path).await?;
        let db = Db::Sqlite(store.pool().clone());
        (Arc::new(store), db)
    };
    store.migrate().await?;
    db.create_tables().await?;
    // idem's problem documents under the service's own base, next to its own errors.
    let mut idem = Idem::from_arc(store)
        .with_policy(RetryDatabaseErrors)
        .with_problem_base(api::PROBLEMS);
    if let Some(wait) = config.store_timeout {
        idem = idem.with_store_timeout(wait);
    }
    let state = App { idem, db, config };
    Ok(Router::new()
        .route("/v1/payments", post(api::create_payment))
        .route("/v1/payments/{id}", get(api::get_payment))
        .route("/v1/payments/{id}/refunds", post(api::create_refund))
        .route("/v1/refunds/{id}", get(api::get_refund))
        .route("/v1/events", post(api::track_event))
        .route("/v1/stats", get(api::stats))
        .with_state(state))
}

fn is_url(url: &str, schemes: &[&str]) -> bool {
    schemes.iter().any(|s| {
        url.strip_prefix(s)
            .is_some_and(|rest| rest.starts_with("://"))
    })
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    let store = idem::PostgresStore::connect(url).await?;
    let db = Db::Postgres(store.pool().clone());
    Ok((Arc::new(store), db))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    Err("a postgres:// DATABASE_URL needs `--features postgres`".into())
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    let store = idem::MySqlStore::connect(url).await?;
    let db = Db::MySql(store.pool().clone());
    Ok((Arc::new(store), db))
}

#[cfg(not(feature = "mysql"))]
async fn mysql(_: &str) -> Result<(Arc<dyn Store>, Db), BoxError> {
    Err("a mysql:// DATABASE_URL needs `--features mysql`".into())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let addr = std::env::var("PAYMENTS_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
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
    let router = app(&url, config).await?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let store = url.split("://").next().filter(|_| url.contains("://"));
    eprintln!(
        "payments: listening on http://{} (store: {})",
        listener.local_addr()?,
        store.unwrap_or(&url)
    );
    axum::serve(listener, router).await?;
    Ok(())
}
