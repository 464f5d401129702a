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
//! | `DATABASE_URL` | `payments.db` | a SQLite file (created if missing; `sqlite://path` and sqlx's other SQLite URLs too, `?mode=rwc` included), or `postgres://..` / `mysql://..` (build with `--features postgres` / `mysql`) |
//! | `PAYMENTS_DELAY_MS` | `0` | processing time added inside payment creation |
//! | `PAYMENTS_SETTLE_MS` | `500` | how long a refund stays `pending` |
//! | `PAYMENTS_STORE_TIMEOUT_MS` | `2000` | the longest idem waits for one answer of the store |
//! | `PAYMENTS_ENCRYPTION_KEYS` | unset | `ID:BASE64,ID:BASE64,..`: 32-byte keys that encrypt every stored response (`Idem::with_encryption`), the first the primary, the others only to read records sealed before a rotation; unset: stored in the clear; malformed: the process stops at start with one line saying why |
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
//! As in the HTTP example, a payment is created in idem's atomic mode (`transaction = tx`): its
//! row and the stored response commit in one transaction, so a crash or a cancellation leaves
//! both or neither. Refunds and events use two commits, kept single by the unique constraint on
//! the operation id.

use std::str::FromStr;

use idem::{Idem, idempotent};
use rust_decimal::Decimal;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

// The business tables and the service setup (store, policy, environment) of the HTTP example;
// its JSON types and operations (`model`) serve HTTP only.
#[path = "payments/db.rs"]
mod db;
#[path = "payments/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "payments/service.rs"]
mod service;

use db::{EventRow, PaymentRow, RefundRow, now_ms};
pub use service::{BoxError, Config};

#[path = "proto/generated.rs"]
mod proto;
pub use proto::pb;

use pb::payments_server::{Payments, PaymentsServer};
use pb::{
    CreatePaymentRequest, CreateRefundRequest, Event, GetPaymentRequest, GetStatsRequest, Payment,
    RecordEventRequest, Refund, Stats,
};

/// The service: the handle, the business tables and the timing knobs of the HTTP example. The
/// handle's policy abandons a `503` (`UNAVAILABLE`: our own database failed), so that its retry
/// runs again under the same operation id, which the business tables are unique on.
#[derive(Clone)]
pub struct PaymentsService {
    app: model::App,
}

/// `#[idempotent]` finds the handle through `self`.
impl idem::AsIdem for PaymentsService {
    fn as_idem(&self) -> &Idem {
        &self.app.idem
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
        let settle = i64::try_from(self.app.config.settle.as_millis()).unwrap_or(i64::MAX);
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
        match self.app.db.refund(&refund_id).await.map_err(db_error)? {
            Some(row) => Ok(Response::new(self.refund_of(row))),
            None => Err(Status::not_found(format!("no refund {refund_id}"))),
        }
    }
}

#[tonic::async_trait]
impl Payments for PaymentsService {
    /// In idem's atomic mode (`transaction = tx`): the payment row is written in `tx`, which idem
    /// commits together with the stored response, or neither.
    #[idempotent(
        scope = [header("x-tenant-id"), header("x-user-id")],
        contract = "exact_replay",
        operation = "/payments.v1.Payments/CreatePayment",
        ttl = "90d",
        lease = "10s",
        transaction = tx
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
        if !self.app.config.delay.is_zero() {
            tokio::time::sleep(self.app.config.delay).await;
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
        let row = db::insert_payment(&mut tx, &row).await.map_err(db_error)?;
        Ok(Response::new(row.into()))
    }

    /// The payment id is part of the scope: the same key on two payments names two refunds.
    #[idempotent(
        scope = [header("x-tenant-id"), header("x-user-id"), request.get_ref().payment_id],
        contract = "latest_state",
        operation = "/payments.v1.Payments/CreateRefund",
        lookup = move |refund_id| self.find_refund(refund_id),
        ttl = "90d"
    )]
    async fn create_refund(
        &self,
        request: Request<CreateRefundRequest>,
    ) -> Result<Response<Refund>, Status> {
        let req = request.into_inner();
        let payment = self
            .app
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
        let row = self.app.db.insert_refund(&row).await.map_err(db_error)?;
        Ok(Response::new(self.refund_of(row)))
    }

    #[idempotent(
        scope = [header("x-tenant-id"), header("x-user-id")],
        contract = "suppress_only",
        operation = "/payments.v1.Payments/RecordEvent",
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
        let row = self.app.db.insert_event(&row).await.map_err(db_error)?;
        Ok(Response::new(Event {
            event_id: row.event_id,
        }))
    }

    async fn get_payment(
        &self,
        request: Request<GetPaymentRequest>,
    ) -> Result<Response<Payment>, Status> {
        let id = request.into_inner().payment_id;
        match self.app.db.payment(&id).await.map_err(db_error)? {
            Some(row) => Ok(Response::new(row.into())),
            None => Err(Status::not_found(format!("no payment {id}"))),
        }
    }

    async fn get_stats(&self, _: Request<GetStatsRequest>) -> Result<Response<Stats>, Status> {
        let c = self.app.db.counts().await.map_err(db_error)?;
        Ok(Response::new(Stats {
            payments: c.payments,
            refunds: c.refunds,
            events: c.events,
        }))
    }
}

/// Opens the store named by `database_url` (a SQLite file path or `sqlite://path`,
/// `postgres://..`, `mysql://..`) as `examples/payments.rs` does, and returns the service.
pub async fn service(database_url: &str, config: Config) -> Result<PaymentsService, BoxError> {
    Ok(PaymentsService {
        app: service::open(database_url, config).await?,
    })
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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service::exit_code(run().await)
}

/// Reads the environment, opens the store, listens and serves; a start-up failure is one line.
async fn run() -> Result<(), BoxError> {
    let (addr, url, config) = service::from_env("127.0.0.1:50051")?;
    let service = service(&url, config).await?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| service::cannot_listen(&addr, &e))?;
    eprintln!(
        "payments_grpc: serving payments.v1.Payments on {} (store: {})",
        listener.local_addr()?,
        service::store_name(&url)
    );
    serve(listener, service).await
}
