//! The payments service of `examples/payments.rs` over gRPC: a tonic service whose write
//! methods are idempotent with `#[idempotent]`, on the same engine and the same stores.
//!
//! ```sh
//! cargo run --example payments_grpc --features tonic   # 127.0.0.1:50051, SQLite file ./payments.db
//! ```
//!
//! | variable | default | |
//! |---|---|---|
//! | `PAYMENTS_ADDR` | `127.0.0.1:50051` | the listening address |
//! | `DATABASE_URL` | `payments.db` | a SQLite file (created if missing; `sqlite://path` too), or `postgres://..` / `mysql://..` (build with `--features postgres` / `mysql`) |
//! | `PAYMENTS_DELAY_MS` | `0` | processing time added inside payment creation |
//! | `PAYMENTS_SETTLE_MS` | `500` | how long a refund stays `pending` |
//! | `PAYMENTS_STORE_TIMEOUT_MS` | `2000` | the longest idem waits for one answer of the store |
//! | `PAYMENTS_LOG` | `warn` | the most detailed level printed to stderr |
//!
//! The service is `payments.v1.Payments` of `examples/proto/payments.proto`; the Rust code in
//! `examples/proto/payments.v1.rs` is generated from it by `tonic-prost-build` with idem's
//! derives put on the messages (`docs/grpc.md` shows the `build.rs`). Every write method takes
//! its key in the metadata `idempotency-key`, and its scope in `x-tenant-id` / `x-user-id`
//! (both optional):
//!
//! - `CreatePayment` (`exact_replay`, TTL 90 days, lease 10 s): a retry answers the stored
//!   `Payment`, or the stored status (the simulated processor failure for currency `XXX`,
//!   `INTERNAL`), with the metadata `idempotent-replayed: true`. The same key with another
//!   amount is `FAILED_PRECONDITION` (reason `KEY_REUSED`); a retry while the first call runs
//!   (`PAYMENTS_DELAY_MS`) is `ABORTED` with a `google.rpc.RetryInfo`. An invalid request
//!   (`INVALID_ARGUMENT`) is not stored: the corrected retry with the same key runs.
//! - `CreateRefund` (`latest_state`): a retry answers the refund's current state.
//! - `RecordEvent` (`suppress_only`, TTL 6 hours): a retry answers the event id alone and
//!   records nothing.
//!
//! `GetPayment` and `GetStats` read back. Amounts are decimal strings: `"100"` and `"100.00"`
//! are the same amount and the same request, answered with the scale they were sent with.
//! Unlike the HTTP example, payments are written in two commits (their row, then the stored
//! response), kept single by the unique constraint on the operation id: a tonic method's
//! parameters are fixed by its service trait, so it takes no `Tx`.

use std::error::Error;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use idem::fingerprint::{Canonical, CanonicalWriter};
use idem::idempotent;
use idem::store::Store;
use idem::{Contract, DefaultPolicy, Disposition, Idem, OutcomePolicy};
use rust_decimal::Decimal;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

#[path = "payments/db.rs"]
#[allow(dead_code)] // the atomic mode's `insert_payment` serves the HTTP example
mod db;

use db::{Db, EventRow, PaymentRow, RefundRow, now_ms};

/// The code generated from `examples/proto/payments.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    include!("proto/payments.v1.rs");
}

use pb::payments_server::{Payments, PaymentsServer};
use pb::{
    CreatePaymentRequest, CreateRefundRequest, Event, GetPaymentRequest, GetStatsRequest, Payment,
    RecordEventRequest, Refund, Stats,
};

/// A boxed error.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// Timing knobs of the example.
#[derive(Clone, Debug)]
pub struct Config {
    /// Processing time added inside payment creation (`PAYMENTS_DELAY_MS`).
    pub delay: Duration,
    /// How long a refund stays `pending` (`PAYMENTS_SETTLE_MS`).
    pub settle: Duration,
    /// The longest idem waits for one answer of the store (`PAYMENTS_STORE_TIMEOUT_MS`).
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
    /// Reads `PAYMENTS_DELAY_MS`, `PAYMENTS_SETTLE_MS` and `PAYMENTS_STORE_TIMEOUT_MS`.
    pub fn from_env() -> Result<Self, BoxError> {
        let ms = |name: &str| -> Result<Option<Duration>, BoxError> {
            match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => v
                    .trim()
                    .parse()
                    .map(|ms| Some(Duration::from_millis(ms)))
                    .map_err(|e| format!("{name}={v:?}: {e}").into()),
                _ => Ok(None),
            }
        };
        let default = Config::default();
        Ok(Config {
            delay: ms("PAYMENTS_DELAY_MS")?.unwrap_or(default.delay),
            settle: ms("PAYMENTS_SETTLE_MS")?.unwrap_or(default.settle),
            store_timeout: ms("PAYMENTS_STORE_TIMEOUT_MS")?,
        })
    }
}

/// The canonical form of a decimal string: `"100"`, `"100.0"` and `"100.00"` are one number.
/// A string that is no decimal is fingerprinted as the string (and refused by the method).
fn decimal_text(text: &String, w: &mut CanonicalWriter<'_>) {
    match Decimal::from_str(text) {
        Ok(amount) => amount.write_canonical(w),
        Err(_) => text.write_canonical(w),
    }
}

/// The default policy, except that `UNAVAILABLE` (503: our own database failed) is never final:
/// the record is abandoned, and a retry runs again under the same operation id, which the
/// business tables are unique on.
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

/// The service.
#[derive(Clone)]
pub struct PaymentsService {
    idem: Idem,
    db: Db,
    config: Config,
}

/// `#[idempotent]` finds the handle through `self`.
impl idem::AsIdem for PaymentsService {
    fn as_idem(&self) -> &Idem {
        &self.idem
    }
}

fn invalid(detail: &str) -> Status {
    Status::invalid_argument(detail)
}

/// Our database failed: `UNAVAILABLE`, retry with the same key.
fn db_error(e: sqlx::Error) -> Status {
    Status::unavailable(format!(
        "the payments database failed ({e}): retry with the same idempotency key"
    ))
}

/// `pay_`, `re_`, `evt_` + the operation id: the business row is a function of the operation
/// (S22), so a retry that takes over a stalled attempt writes the same row, which the unique
/// constraints refuse (S23).
fn business_id(prefix: &str) -> Result<(String, String), Status> {
    let op = idem::operation_id().ok_or_else(|| Status::internal("no operation id"))?;
    let op = op.to_string();
    Ok((format!("{prefix}_{}", op.replace('-', "")), op))
}

fn amount(text: &str) -> Result<Decimal, Status> {
    Decimal::from_str(text.trim())
        .map_err(|_| invalid("`amount` must be a decimal string, as in \"100.00\""))
}

impl From<PaymentRow> for Payment {
    fn from(row: PaymentRow) -> Self {
        Payment {
            payment_id: row.payment_id,
            status: "succeeded".to_owned(),
            amount: row.amount,
            currency: row.currency,
            customer_id: row.customer_id,
            order_id: row.order_id,
        }
    }
}

impl PaymentsService {
    fn refund_of(&self, row: RefundRow) -> Refund {
        let settle = i64::try_from(self.config.settle.as_millis()).unwrap_or(i64::MAX);
        let settled = now_ms().saturating_sub(row.created_at_ms) >= settle;
        Refund {
            refund_id: row.refund_id,
            payment_id: row.payment_id,
            amount: row.amount,
            status: if settled { "succeeded" } else { "pending" }.to_owned(),
        }
    }

    /// The refund `refund_id` as it is now: what a `CreateRefund` retry answers.
    async fn find_refund(&self, refund_id: String) -> Result<Response<Refund>, Status> {
        match self.db.refund(&refund_id).await.map_err(db_error)? {
            Some(row) => Ok(Response::new(self.refund_of(row))),
            None => Err(Status::not_found(format!("no refund {refund_id}"))),
        }
    }
}

#[tonic::async_trait]
impl Payments for PaymentsService {
    #[idempotent(
        scope = [header("x-tenant-id"), header("x-user-id")],
        contract = "exact_replay",
        ttl = "90d",
        lease = "10s"
    )]
    async fn create_payment(
        &self,
        request: Request<CreatePaymentRequest>,
    ) -> Result<Response<Payment>, Status> {
        let req = request.into_inner();
        if amount(&req.amount)? <= Decimal::ZERO {
            return Err(invalid("`amount` must be greater than zero"));
        }
        if req.currency.len() != 3 || !req.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(invalid(
                "`currency` must be an ISO 4217 code: three capital letters",
            ));
        }
        if !self.config.delay.is_zero() {
            tokio::time::sleep(self.config.delay).await;
        }
        if req.currency == "XXX" {
            // The method's own answer, details included: stored and replayed under exact_replay.
            return Err(Status::with_error_details(
                tonic::Code::Internal,
                "the processor declined to answer for currency XXX (simulated failure)",
                ErrorDetails::with_error_info(
                    "PROCESSOR_FAILURE",
                    "payments.example",
                    std::collections::HashMap::new(),
                ),
            ));
        }
        let (payment_id, operation_id) = business_id("pay")?;
        let metadata = (!req.metadata.is_empty()).then(|| {
            let map: serde_json::Map<_, _> = req
                .metadata
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect();
            serde_json::Value::Object(map).to_string()
        });
        let row = PaymentRow {
            payment_id,
            operation_id,
            amount: req.amount.trim().to_owned(),
            currency: req.currency,
            customer_id: req.customer_id,
            order_id: req.order_id,
            metadata,
            created_at: now_ms(),
        };
        let row = self.db.insert_payment(&row).await.map_err(db_error)?;
        Ok(Response::new(row.into()))
    }

    /// The payment id is part of the scope: the same key on two payments names two refunds.
    #[idempotent(
        scope = [header("x-tenant-id"), header("x-user-id"), request.get_ref().payment_id],
        contract = "latest_state",
        lookup = move |refund_id| self.find_refund(refund_id),
        ttl = "90d"
    )]
    async fn create_refund(
        &self,
        request: Request<CreateRefundRequest>,
    ) -> Result<Response<Refund>, Status> {
        let req = request.into_inner();
        let payment = self
            .db
            .payment(&req.payment_id)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Status::not_found(format!("no payment {}", req.payment_id)))?;
        let refund = amount(&req.amount)?;
        if refund <= Decimal::ZERO {
            return Err(invalid("`amount` must be greater than zero"));
        }
        if refund > amount(&payment.amount)? {
            return Err(invalid(&format!(
                "`amount` exceeds the payment's amount ({})",
                payment.amount
            )));
        }
        let (refund_id, operation_id) = business_id("re")?;
        let row = RefundRow {
            refund_id,
            operation_id,
            payment_id: req.payment_id,
            amount: req.amount.trim().to_owned(),
            created_at_ms: now_ms(),
        };
        let row = self.db.insert_refund(&row).await.map_err(db_error)?;
        Ok(Response::new(self.refund_of(row)))
    }

    #[idempotent(
        scope = [header("x-tenant-id"), header("x-user-id")],
        contract = "suppress_only",
        ttl = "6h"
    )]
    async fn record_event(
        &self,
        request: Request<RecordEventRequest>,
    ) -> Result<Response<Event>, Status> {
        let req = request.into_inner();
        let (event_id, operation_id) = business_id("evt")?;
        let properties = (!req.properties.is_empty()).then(|| {
            let map: serde_json::Map<_, _> = req
                .properties
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect();
            serde_json::Value::Object(map).to_string()
        });
        let row = EventRow {
            event_id,
            operation_id,
            name: req.name,
            properties,
        };
        let row = self.db.insert_event(&row).await.map_err(db_error)?;
        Ok(Response::new(Event {
            event_id: row.event_id,
        }))
    }

    async fn get_payment(
        &self,
        request: Request<GetPaymentRequest>,
    ) -> Result<Response<Payment>, Status> {
        let id = request.into_inner().payment_id;
        match self.db.payment(&id).await.map_err(db_error)? {
            Some(row) => Ok(Response::new(row.into())),
            None => Err(Status::not_found(format!("no payment {id}"))),
        }
    }

    async fn get_stats(&self, _: Request<GetStatsRequest>) -> Result<Response<Stats>, Status> {
        let c = self.db.counts().await.map_err(db_error)?;
        Ok(Response::new(Stats {
            payments: c.payments,
            refunds: c.refunds,
            events: c.events,
        }))
    }
}

/// Opens the store named by `database_url` (a SQLite file path or `sqlite://path`,
/// `postgres://..`, `mysql://..`), runs its migrations, creates the business tables in the same
/// database, and returns the service.
pub async fn service(database_url: &str, config: Config) -> Result<PaymentsService, BoxError> {
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
    let mut idem = Idem::from_arc(store).with_policy(RetryDatabaseErrors);
    if let Some(wait) = config.store_timeout {
        idem = idem.with_store_timeout(wait);
    }
    Ok(PaymentsService { idem, db, config })
}

/// Serves `service` on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: PaymentsService,
) -> Result<(), BoxError> {
    tonic::transport::Server::builder()
        .add_service(PaymentsServer::new(service))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
        .await?;
    Ok(())
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
    let addr = std::env::var("PAYMENTS_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".to_owned());
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
    let service = service(&url, config).await?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let store = url.split("://").next().filter(|_| url.contains("://"));
    eprintln!(
        "payments_grpc: serving payments.v1.Payments on {} (store: {})",
        listener.local_addr()?,
        store.unwrap_or(&url)
    );
    serve(listener, service).await
}
