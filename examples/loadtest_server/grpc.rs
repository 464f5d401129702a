//! `--front grpc`: the payment of the axum routes as a unary tonic method, `CreatePayment` of
//! `payments.v1.Payments` (`examples/proto/payments.proto`), served twice on one port:
//!
//! | method path | what runs |
//! |---|---|
//! | `/bare.Payments/CreatePayment` | the method alone: build the `Payment` message from the request |
//! | `/payments.v1.Payments/CreatePayment` | the same method under `#[idempotent(scope = global, contract = "exact_replay")]` |
//!
//! `examples/loadgen.rs --grpc` calls either path; the bare service answers under its own name
//! through a wrapper that renames the path, so that both run in one server, on one runtime.

use core::convert::Infallible;
use core::task::{Context, Poll};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idem::{Idem, idempotent};
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use super::BoxError;

#[path = "../proto/generated.rs"]
mod proto;
use proto::pb;

use pb::payments_server::{Payments, PaymentsServer};
use pb::{
    CreatePaymentRequest, CreateRefundRequest, Event, GetPaymentRequest, GetStatsRequest, Payment,
    RecordEventRequest, Refund, Stats,
};

/// The work both services do: the payment answered.
fn charge(req: CreatePaymentRequest) -> Payment {
    Payment {
        payment_id: format!("pay_{}", req.order_id),
        status: "succeeded".to_owned(),
        amount: req.amount,
        currency: req.currency,
        customer_id: req.customer_id,
        order_id: req.order_id,
    }
}

type Answer<T> = Result<Response<T>, Status>;

fn unimplemented() -> Status {
    Status::unimplemented("the load test serves CreatePayment only")
}

/// `CreatePayment` under `#[idempotent]`.
#[derive(Clone)]
pub struct IdemPayments {
    idem: Idem,
    runs: Arc<AtomicU64>,
}

impl idem::AsIdem for IdemPayments {
    fn as_idem(&self) -> &Idem {
        &self.idem
    }
}

/// `CreatePayment` alone.
#[derive(Clone)]
pub struct BarePayments;

#[tonic::async_trait]
impl Payments for IdemPayments {
    #[idempotent(scope = global, contract = "exact_replay")]
    async fn create_payment(
        &self,
        request: Request<CreatePaymentRequest>,
    ) -> Result<Response<Payment>, Status> {
        self.runs.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(charge(request.into_inner())))
    }

    async fn create_refund(&self, _: Request<CreateRefundRequest>) -> Answer<Refund> {
        Err(unimplemented())
    }

    async fn record_event(&self, _: Request<RecordEventRequest>) -> Answer<Event> {
        Err(unimplemented())
    }

    async fn get_payment(&self, _: Request<GetPaymentRequest>) -> Answer<Payment> {
        Err(unimplemented())
    }

    async fn get_stats(&self, _: Request<GetStatsRequest>) -> Answer<Stats> {
        Err(unimplemented())
    }
}

#[tonic::async_trait]
impl Payments for BarePayments {
    async fn create_payment(
        &self,
        request: Request<CreatePaymentRequest>,
    ) -> Result<Response<Payment>, Status> {
        Ok(Response::new(charge(request.into_inner())))
    }

    async fn create_refund(&self, _: Request<CreateRefundRequest>) -> Answer<Refund> {
        Err(unimplemented())
    }

    async fn record_event(&self, _: Request<RecordEventRequest>) -> Answer<Event> {
        Err(unimplemented())
    }

    async fn get_payment(&self, _: Request<GetPaymentRequest>) -> Answer<Payment> {
        Err(unimplemented())
    }

    async fn get_stats(&self, _: Request<GetStatsRequest>) -> Answer<Stats> {
        Err(unimplemented())
    }
}

/// The bare service under the name `bare.Payments`: its paths renamed to the generated
/// server's before it routes them.
#[derive(Clone)]
struct Bare(PaymentsServer<BarePayments>);

impl NamedService for Bare {
    const NAME: &'static str = "bare.Payments";
}

impl tower::Service<http::Request<tonic::body::Body>> for Bare {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future =
        <PaymentsServer<BarePayments> as tower::Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower::Service::<http::Request<tonic::body::Body>>::poll_ready(&mut self.0, cx)
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        let method = req.uri().path().rsplit('/').next().unwrap_or_default();
        if let Ok(uri) = format!("/payments.v1.Payments/{method}").parse() {
            *req.uri_mut() = uri;
        }
        self.0.call(req)
    }
}

/// Serves both services on `listener` over `idem` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    idem: Idem,
    runs: Arc<AtomicU64>,
) -> Result<(), BoxError> {
    tonic::transport::Server::builder()
        .add_service(PaymentsServer::new(IdemPayments { idem, runs }))
        .add_service(Bare(PaymentsServer::new(BarePayments)))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
        .await?;
    Ok(())
}
