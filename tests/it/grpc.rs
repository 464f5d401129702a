//! The gRPC payments example (`examples/payments_grpc.rs`) end to end: its tonic server on a real
//! TCP socket, spoken to by the tonic client generated from the same proto, on SQLite,
//! PostgreSQL and MariaDB; and the code it is built from, generated from
//! `examples/proto/payments.proto` without `protoc`.

use std::path::Path;

// ---------------------------------------------------------------- the generated code

/// The Rust code of `examples/proto/payments.proto`, generated as a service's `build.rs` would
/// (`docs/grpc.md`): tonic's server and client, and idem's derives put on the messages with
/// `type_attribute` / `field_attribute`. The proto is compiled by `protox`, a protobuf
/// compiler in Rust, so that no `protoc` is needed.
fn generate() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/proto");
    let fds = protox::compile(["payments.proto"], [&root]).expect("payments.proto compiles");
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        .out_dir(out.path())
        .emit_rerun_if_changed(false)
        // Requests: fingerprinted; the environment fields never are.
        .message_attribute(
            ".payments.v1.CreatePaymentRequest",
            "#[derive(idem::Fingerprint)]",
        )
        .field_attribute(
            ".payments.v1.CreatePaymentRequest.amount",
            "#[fingerprint(with = super::decimal_text)]",
        )
        .field_attribute(
            ".payments.v1.CreatePaymentRequest.client_ip",
            "#[fingerprint(env)]",
        )
        .field_attribute(
            ".payments.v1.CreatePaymentRequest.timestamp",
            "#[fingerprint(env)]",
        )
        .field_attribute(
            ".payments.v1.CreatePaymentRequest.signature",
            "#[fingerprint(env)]",
        )
        .message_attribute(
            ".payments.v1.CreateRefundRequest",
            "#[derive(idem::Fingerprint)]",
        )
        .field_attribute(
            ".payments.v1.CreateRefundRequest.amount",
            "#[fingerprint(with = super::decimal_text)]",
        )
        .message_attribute(
            ".payments.v1.RecordEventRequest",
            "#[derive(idem::Fingerprint)]",
        )
        // Responses: they carry their business number.
        .message_attribute(".payments.v1.Payment", "#[derive(idem::Snapshot)]")
        .field_attribute(".payments.v1.Payment.payment_id", "#[snapshot(biz_no)]")
        .message_attribute(".payments.v1.Refund", "#[derive(idem::Snapshot)]")
        .field_attribute(".payments.v1.Refund.refund_id", "#[snapshot(biz_no)]")
        .message_attribute(".payments.v1.Event", "#[derive(idem::Snapshot)]")
        .field_attribute(".payments.v1.Event.event_id", "#[snapshot(biz_no)]")
        .compile_fds(fds)
        .expect("tonic-prost-build generates the service");
    std::fs::read_to_string(out.path().join("payments.v1.rs")).unwrap()
}

/// `examples/proto/payments.v1.rs` is what `generate` makes of the proto: the example builds
/// without a code generator, and cannot drift from its proto. `IDEM_BLESS=1` rewrites it.
#[test]
fn the_generated_code_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/proto/payments.v1.rs");
    let generated = generate();
    if std::env::var_os("IDEM_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "examples/proto/payments.v1.rs is not what examples/proto/payments.proto generates: run \
         `IDEM_BLESS=1 cargo test --all-features --test it grpc::the_generated_code_is_current`"
    );
}

// ---------------------------------------------------------------- fixtures

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

#[path = "../../examples/payments_grpc.rs"]
#[allow(dead_code)]
// Both payments examples mount `examples/payments/db.rs`, the business tables they share.
#[allow(clippy::duplicate_mod)]
mod payments_grpc;

use payments_grpc::Config;
use payments_grpc::pb::payments_client::PaymentsClient;
use payments_grpc::pb::{
    CreatePaymentRequest, CreateRefundRequest, GetPaymentRequest, GetStatsRequest,
    RecordEventRequest,
};

use crate::backends::{Backend, Database, backend_tests};
use crate::servers::unique;

struct Server {
    addr: SocketAddr,
    /// The example's database, kept for as long as the scenario runs.
    _db: Database,
}

impl Server {
    async fn client(&self) -> PaymentsClient<Channel> {
        PaymentsClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    async fn stats(&self) -> (i64, i64, i64) {
        let s = self
            .client()
            .await
            .get_stats(GetStatsRequest {})
            .await
            .unwrap()
            .into_inner();
        (s.payments, s.refunds, s.events)
    }
}

/// The example served on a database of its own with `config`; nothing when the backend's
/// server is not configured.
async fn serve_with(backend: Backend, config: Config, scenario: impl AsyncFnOnce(&Server)) {
    let Some(db) = backend.database().await else {
        return;
    };
    let service = payments_grpc::service(&db.url, config).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(payments_grpc::serve(listener, service));
    scenario(&Server { addr, _db: db }).await;
}

async fn serve(backend: Backend, scenario: impl AsyncFnOnce(&Server)) {
    serve_with(backend, Config::default(), scenario).await;
}

/// Payment creation takes 1.5 s, so that a duplicate meets it in flight.
async fn serve_slow_handler(backend: Backend, scenario: impl AsyncFnOnce(&Server)) {
    let config = Config {
        delay: Duration::from_millis(1500),
        ..Config::default()
    };
    serve_with(backend, config, scenario).await;
}

/// Refunds settle after 1 s.
async fn serve_slow_settling(backend: Backend, scenario: impl AsyncFnOnce(&Server)) {
    let config = Config {
        settle: Duration::from_millis(1000),
        ..Config::default()
    };
    serve_with(backend, config, scenario).await;
}

/// `message` with the metadata `idempotency-key: key` (if any) and `extra`.
fn with_key<T>(message: T, key: Option<&str>, extra: &[(&'static str, &str)]) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(key) = key {
        request
            .metadata_mut()
            .insert("idempotency-key", MetadataValue::try_from(key).unwrap());
    }
    for (name, value) in extra {
        request
            .metadata_mut()
            .insert(*name, MetadataValue::try_from(*value).unwrap());
    }
    request
}

fn payment(amount: &str) -> CreatePaymentRequest {
    CreatePaymentRequest {
        amount: amount.to_owned(),
        currency: "EUR".to_owned(),
        customer_id: "cus_1".to_owned(),
        order_id: "ord_1".to_owned(),
        ..Default::default()
    }
}

fn replayed(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Asserts `status` is `code` with idem's `ErrorInfo` of `reason`.
fn assert_condition(status: &Status, code: Code, reason: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.reason, reason);
    assert_eq!(info.domain, idem::tonic::ERROR_DOMAIN);
}

// ---------------------------------------------------------------- scenarios

backend_tests!(
    2,
    serve,
    [sqlite, postgres, mysql],
    create_and_replay,
    equivalent_requests_replay,
    key_reused_is_failed_precondition,
    missing_and_invalid_keys_are_invalid_argument,
    invalid_request_then_corrected_retry,
    processor_failure_is_stored_and_replayed,
    events_suppress_only,
    scope_metadata_separates_tenants,
    an_oversized_message_never_reaches_the_method,
);
backend_tests!(
    2,
    serve_slow_handler,
    [sqlite, postgres, mysql],
    concurrent_duplicate_is_aborted_with_retry_info,
    the_client_layer_waits_out_an_aborted_call,
);
backend_tests!(
    2,
    serve_slow_settling,
    [sqlite, postgres, mysql],
    refund_latest_state,
);

async fn create_and_replay(s: &Server) {
    let key = unique("grpc_pay");
    let mut client = s.client().await;
    let first = client
        .create_payment(with_key(payment("100.00"), Some(&key), &[]))
        .await
        .unwrap();
    assert!(!replayed(first.metadata()));
    let first = first.into_inner();
    assert!(first.payment_id.starts_with("pay_"), "{first:?}");
    assert_eq!(
        (first.amount.as_str(), first.status.as_str()),
        ("100.00", "succeeded")
    );

    let again = client
        .create_payment(with_key(payment("100.00"), Some(&key), &[]))
        .await
        .unwrap();
    assert!(replayed(again.metadata()), "{:?}", again.metadata());
    assert_eq!(
        again.into_inner(),
        first,
        "the stored message, field for field"
    );
    assert_eq!(s.stats().await.0, 1, "charged once");
    let read = client
        .get_payment(GetPaymentRequest {
            payment_id: first.payment_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read, first);
}

async fn equivalent_requests_replay(s: &Server) {
    let key = unique("grpc_equiv");
    let mut client = s.client().await;
    let first = client
        .create_payment(with_key(payment("100.00"), Some(&key), &[]))
        .await
        .unwrap()
        .into_inner();
    // Another spelling of the amount, other environment fields: the same request.
    let retry = CreatePaymentRequest {
        client_ip: "10.0.0.9".to_owned(),
        timestamp: "2026-12-02T10:00:00Z".to_owned(),
        signature: "sig-2".to_owned(),
        ..payment("100")
    };
    let again = client
        .create_payment(with_key(retry, Some(&key), &[]))
        .await
        .unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner().payment_id, first.payment_id);
    assert_eq!(s.stats().await.0, 1);
}

async fn key_reused_is_failed_precondition(s: &Server) {
    let key = unique("grpc_reused");
    let mut client = s.client().await;
    client
        .create_payment(with_key(payment("100.00"), Some(&key), &[]))
        .await
        .unwrap();
    let err = client
        .create_payment(with_key(payment("250.00"), Some(&key), &[]))
        .await
        .unwrap_err();
    assert_condition(&err, Code::FailedPrecondition, "KEY_REUSED");
    let info = err.get_details_error_info().unwrap();
    assert_eq!(info.metadata.get("idempotency_key"), Some(&key));
    let failure = err.get_details_precondition_failure().unwrap();
    assert_eq!(failure.violations[0].r#type, "IDEMPOTENCY_KEY");
    assert_eq!(failure.violations[0].subject, key);
    assert!(
        err.message().contains("send a new key"),
        "{}",
        err.message()
    );
    assert_eq!(s.stats().await.0, 1, "the second request never ran");
}

async fn missing_and_invalid_keys_are_invalid_argument(s: &Server) {
    let mut client = s.client().await;
    let err = client
        .create_payment(with_key(payment("100.00"), None, &[]))
        .await
        .unwrap_err();
    assert_condition(&err, Code::InvalidArgument, "MISSING_KEY");
    let bad = err.get_details_bad_request().unwrap();
    assert_eq!(bad.field_violations[0].field, "idempotency-key");

    let long = "k".repeat(256);
    let err = client
        .create_payment(with_key(payment("100.00"), Some(&long), &[]))
        .await
        .unwrap_err();
    assert_condition(&err, Code::InvalidArgument, "INVALID_KEY");
    // An sf-string with an escape that is not one: refused, not guessed at.
    let err = client
        .create_payment(with_key(payment("100.00"), Some(r#""a\b""#), &[]))
        .await
        .unwrap_err();
    assert_condition(&err, Code::InvalidArgument, "INVALID_KEY");
    // Not ASCII (bytes a proxy may pass through): refused, whatever their encoding.
    let mut non_ascii = with_key(payment("100.00"), None, &[]);
    non_ascii.metadata_mut().insert(
        "idempotency-key",
        MetadataValue::try_from(&b"caf\xc3\xa9"[..]).unwrap(),
    );
    let err = client.create_payment(non_ascii).await.unwrap_err();
    assert_condition(&err, Code::InvalidArgument, "INVALID_KEY");
    // Two values.
    let mut twice = with_key(payment("100.00"), Some("k-1"), &[]);
    twice
        .metadata_mut()
        .append("idempotency-key", MetadataValue::from_static("k-2"));
    let err = client.create_payment(twice).await.unwrap_err();
    assert_condition(&err, Code::InvalidArgument, "INVALID_KEY");
    assert_eq!(s.stats().await.0, 0);
}

async fn invalid_request_then_corrected_retry(s: &Server) {
    let key = unique("grpc_invalid");
    let mut client = s.client().await;
    let err = client
        .create_payment(with_key(payment("0"), Some(&key), &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(!replayed(err.metadata()));
    // Not stored: the same key with the same invalid request runs again (and fails again)...
    let err = client
        .create_payment(with_key(payment("0"), Some(&key), &[]))
        .await
        .unwrap_err();
    assert!(!replayed(err.metadata()));
    // ... and the corrected request with the same key runs.
    let ok = client
        .create_payment(with_key(payment("10.00"), Some(&key), &[]))
        .await
        .unwrap();
    assert!(!replayed(ok.metadata()));
    assert_eq!(s.stats().await.0, 1);
}

async fn processor_failure_is_stored_and_replayed(s: &Server) {
    let key = unique("grpc_xxx");
    let mut client = s.client().await;
    let failing = CreatePaymentRequest {
        currency: "XXX".to_owned(),
        ..payment("5.00")
    };
    let first = client
        .create_payment(with_key(failing.clone(), Some(&key), &[]))
        .await
        .unwrap_err();
    assert_eq!(first.code(), Code::Internal);
    assert!(!replayed(first.metadata()));
    let again = client
        .create_payment(with_key(failing, Some(&key), &[]))
        .await
        .unwrap_err();
    assert!(replayed(again.metadata()), "{again:?}");
    assert_eq!(again.code(), Code::Internal);
    assert_eq!(again.message(), first.message());
    // The method's own details, byte for byte.
    assert_eq!(again.details(), first.details());
    assert_eq!(
        again.get_details_error_info().unwrap().reason,
        "PROCESSOR_FAILURE"
    );
    assert_eq!(s.stats().await.0, 0);
}

/// Starts a payment with `key` on the slow handler and returns once it runs (500 ms in).
async fn start_in_flight(
    s: &Server,
    key: &str,
) -> tokio::task::JoinHandle<Result<tonic::Response<Payment>, Status>> {
    let mut client = s.client().await;
    let key = key.to_owned();
    let first = tokio::spawn(async move {
        client
            .create_payment(with_key(payment("100.00"), Some(&key), &[]))
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    first
}

async fn concurrent_duplicate_is_aborted_with_retry_info(s: &Server) {
    let key = unique("grpc_busy");
    let first = start_in_flight(s, &key).await;
    let mut client = s.client().await;
    let err = client
        .create_payment(with_key(payment("100.00"), Some(&key), &[]))
        .await
        .unwrap_err();
    assert_condition(&err, Code::Aborted, "IN_PROGRESS");
    let delay = err.get_details_retry_info().unwrap().retry_delay.unwrap();
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(10),
        "{delay:?}"
    );
    assert!(err.metadata().get("retry-after").is_some());
    let first = first.await.unwrap().unwrap().into_inner();
    let again = client
        .create_payment(with_key(payment("100.00"), Some(&key), &[]))
        .await
        .unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner().payment_id, first.payment_id);
    assert_eq!(s.stats().await.0, 1);
}

/// Through idem-client's layer, a duplicate that meets the first call in flight waits for
/// `RetryInfo`'s delay and retries with the same key: it gets the first call's payment, replayed.
async fn the_client_layer_waits_out_an_aborted_call(s: &Server) {
    use idem_client::tonic::GrpcIdempotencyLayer;
    use idem_client::{Delivery, RetryPolicy};

    let key = unique("grpc_layer");
    let first = start_in_flight(s, &key).await;
    let channel = Channel::from_shared(format!("http://{}", s.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let channel = tower::ServiceBuilder::new()
        // The server's RetryInfo asks for the lease's remaining 9.5 s; the cap keeps the test short.
        .layer(GrpcIdempotencyLayer::new(
            RetryPolicy::default().max_retry_after(Duration::from_millis(300)),
        ))
        .service(channel);
    let mut client = PaymentsClient::new(channel);
    let second = client
        .create_payment(with_key(payment("100.00"), Some(&key), &[]))
        .await
        .unwrap();
    let delivery = second.extensions().get::<Delivery>().unwrap().clone();
    assert!(delivery.attempts >= 2, "{delivery:?}");
    assert!(delivery.replayed && replayed(second.metadata()));
    assert_eq!(delivery.key.as_deref(), Some(&*key));
    let first = first.await.unwrap().unwrap().into_inner();
    assert_eq!(second.into_inner().payment_id, first.payment_id);
    // Without a key of the caller's, the layer sets one, and a final answer is one attempt.
    let fresh = client
        .create_payment(Request::new(payment("5.00")))
        .await
        .unwrap();
    let delivery = fresh.extensions().get::<Delivery>().unwrap().clone();
    assert_eq!(delivery.attempts, 1);
    assert!(!delivery.replayed);
    assert!(delivery.key.is_some_and(|k| k.len() == 36));
    assert_eq!(s.stats().await.0, 2);
}

/// A message over tonic's decoding limit (4 MiB) is refused by tonic before the method runs, and
/// before any claim: the key stays free for the corrected request.
async fn an_oversized_message_never_reaches_the_method(s: &Server) {
    let key = unique("grpc_big");
    let mut client = s.client().await;
    let big = CreatePaymentRequest {
        customer_id: "c".repeat(5 << 20),
        ..payment("1.00")
    };
    let err = client
        .create_payment(with_key(big, Some(&key), &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    let ok = client
        .create_payment(with_key(payment("1.00"), Some(&key), &[]))
        .await
        .unwrap();
    assert!(!replayed(ok.metadata()));
    assert_eq!(s.stats().await.0, 1);
}

async fn refund_latest_state(s: &Server) {
    let mut client = s.client().await;
    let pay = client
        .create_payment(with_key(payment("100.00"), Some(&unique("grpc_rp")), &[]))
        .await
        .unwrap()
        .into_inner();
    let key = unique("grpc_refund");
    let refund = || CreateRefundRequest {
        payment_id: pay.payment_id.clone(),
        amount: "25.00".to_owned(),
    };
    let first = client
        .create_refund(with_key(refund(), Some(&key), &[]))
        .await
        .unwrap();
    assert!(!replayed(first.metadata()));
    let first = first.into_inner();
    assert_eq!(first.status, "pending");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = client
        .create_refund(with_key(refund(), Some(&key), &[]))
        .await
        .unwrap();
    assert!(replayed(again.metadata()));
    let again = again.into_inner();
    assert_eq!(again.refund_id, first.refund_id);
    assert_eq!(
        again.status, "succeeded",
        "the current state, not the stored one"
    );
    assert_eq!(s.stats().await.1, 1);
}

async fn events_suppress_only(s: &Server) {
    let key = unique("grpc_evt");
    let mut client = s.client().await;
    let event = || RecordEventRequest {
        name: "checkout.viewed".to_owned(),
        properties: [("page".to_owned(), "cart".to_owned())].into(),
    };
    let first = client
        .record_event(with_key(event(), Some(&key), &[]))
        .await
        .unwrap()
        .into_inner();
    assert!(first.event_id.starts_with("evt_"));
    let again = client
        .record_event(with_key(event(), Some(&key), &[]))
        .await
        .unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner().event_id, first.event_id);
    assert_eq!(s.stats().await.2, 1, "the duplicate recorded nothing");
}

async fn scope_metadata_separates_tenants(s: &Server) {
    let key = unique("grpc_scope");
    let mut client = s.client().await;
    let a = client
        .create_payment(with_key(
            payment("1.00"),
            Some(&key),
            &[("x-tenant-id", "acme")],
        ))
        .await
        .unwrap()
        .into_inner();
    let b = client
        .create_payment(with_key(
            payment("1.00"),
            Some(&key),
            &[("x-tenant-id", "globex")],
        ))
        .await
        .unwrap();
    assert!(
        !replayed(b.metadata()),
        "another tenant's key is another operation"
    );
    assert_ne!(b.into_inner().payment_id, a.payment_id);
    let again = client
        .create_payment(with_key(
            payment("1.00"),
            Some(&key),
            &[("x-tenant-id", "acme")],
        ))
        .await
        .unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner().payment_id, a.payment_id);
    assert_eq!(s.stats().await.0, 2);
}

// ---------------------------------------------------------------- a probe service

use std::sync::{Arc, Mutex};

use idem::{AsIdem, Idem, idempotent};
use payments_grpc::pb::payments_server::{Payments, PaymentsServer};
use payments_grpc::pb::{Event, Payment, Refund, Stats};

/// A service of the same proto whose `CreatePayment` records the operation id it runs under
/// (its effect) and then takes `after_effect` to answer: a caller can give up between the two.
#[derive(Clone)]
struct Probe {
    idem: Idem,
    effects: Arc<Mutex<Vec<String>>>,
    after_effect: Duration,
}

impl AsIdem for Probe {
    fn as_idem(&self) -> &Idem {
        &self.idem
    }
}

#[tonic::async_trait]
impl Payments for Probe {
    /// A duplicate waits for the first call (`wait`), at most 10 s; the key is remembered for
    /// 10 hours past its 1-hour TTL.
    #[idempotent(scope = default, ttl = "1h", remember = "10h", lease = "5s", wait = "10s")]
    async fn create_payment(
        &self,
        request: Request<CreatePaymentRequest>,
    ) -> Result<tonic::Response<Payment>, Status> {
        let op = idem::operation_id().expect("an operation id").to_string();
        self.effects.lock().unwrap().push(op.clone());
        tokio::time::sleep(self.after_effect).await;
        Ok(tonic::Response::new(Payment {
            payment_id: format!("pay_{op}"),
            amount: request.into_inner().amount,
            ..Default::default()
        }))
    }

    #[idempotent(scope = global, fail_open = true, operation = "probe.refund")]
    async fn create_refund(
        &self,
        _request: Request<CreateRefundRequest>,
    ) -> Result<tonic::Response<Refund>, Status> {
        self.effects.lock().unwrap().push("refund".to_owned());
        Ok(tonic::Response::new(Refund {
            refund_id: "re_1".to_owned(),
            ..Default::default()
        }))
    }

    /// Panics on its first run, after its effect.
    #[idempotent(scope = global, operation = "probe.event", lease = "5s")]
    async fn record_event(
        &self,
        _request: Request<RecordEventRequest>,
    ) -> Result<tonic::Response<Event>, Status> {
        let op = idem::operation_id().expect("an operation id").to_string();
        let first = {
            let mut effects = self.effects.lock().unwrap();
            effects.push(op.clone());
            effects.len() == 1
        };
        assert!(!first, "the probe's first run panics after its effect");
        Ok(tonic::Response::new(Event { event_id: op }))
    }

    async fn get_payment(
        &self,
        _: Request<GetPaymentRequest>,
    ) -> Result<tonic::Response<Payment>, Status> {
        Err(Status::unimplemented("probe"))
    }

    async fn get_stats(
        &self,
        _: Request<GetStatsRequest>,
    ) -> Result<tonic::Response<Stats>, Status> {
        Err(Status::unimplemented("probe"))
    }
}

/// `probe` served on a loopback port; its client.
async fn serve_probe(probe: Probe) -> PaymentsClient<Channel> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PaymentsServer::new(probe))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    PaymentsClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// The default scope reads the metadata as headers, as an authenticating interceptor would
/// leave them.
fn tenant_scope(idem: Idem) -> Idem {
    idem.with_default_scope(|parts| {
        let tenant = parts.headers.get("x-tenant-id")?.to_str().ok()?;
        Some(vec![tenant.to_owned()])
    })
}

/// A client that gives up on its call after the method's effect (its deadline passes, the
/// stream is reset): the method's future is dropped, the record keeps its operation id and its
/// lease ends at once, so the retry continues the same operation at once — the effect happens
/// again under the same operation id, never under a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_keeps_its_operation_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = idem::SqliteStore::open(dir.path().join("idem.db"))
        .await
        .unwrap();
    idem::store::Store::migrate(&store).await.unwrap();
    let probe = Probe {
        idem: tenant_scope(Idem::new(store)),
        effects: Arc::default(),
        after_effect: Duration::from_millis(800),
    };
    let effects = probe.effects.clone();
    let mut client = serve_probe(probe).await;
    let key = unique("grpc_cancel");
    let call = || with_key(payment("7.00"), Some(&key), &[("x-tenant-id", "acme")]);
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), client.create_payment(call())).await;
    assert!(gave_up.is_err(), "the client gave up before the answer");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let retry = client.create_payment(call()).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the retry took over at once, not after the 5 s lease"
    );
    assert!(!replayed(retry.metadata()), "it ran: nothing was stored");
    let effects = effects.lock().unwrap().clone();
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(effects[0], effects[1], "one operation id for both runs");
    assert_eq!(retry.into_inner().payment_id, format!("pay_{}", effects[0]));

    // No identity to scope the key by: UNAUTHENTICATED, before anything runs.
    let err = client
        .create_payment(with_key(payment("7.00"), Some(&key), &[]))
        .await
        .unwrap_err();
    assert_condition(&err, Code::Unauthenticated, "UNSCOPED");
}

/// A call retried past the TTL, within the remember window, is `FAILED_PRECONDITION` with reason
/// `KEY_EXPIRED` and what the record kept as `ErrorInfo` metadata; the method does not run.
/// Another payload is refused as reused; past the window the key is new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_ttl_is_key_expired() {
    use idem::store::ManualClock;
    use tonic_types::StatusExt;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::starting_now());
    let store = idem::SqliteStore::open(dir.path().join("idem.db"))
        .await
        .unwrap()
        .with_clock(clock.clone());
    idem::store::Store::migrate(&store).await.unwrap();
    let probe = Probe {
        idem: tenant_scope(Idem::new(store)),
        effects: Arc::default(),
        after_effect: Duration::ZERO,
    };
    let effects = probe.effects.clone();
    let mut client = serve_probe(probe).await;
    let key = unique("grpc_remember");
    let call = |amount: &str| with_key(payment(amount), Some(&key), &[("x-tenant-id", "acme")]);
    let paid = client
        .create_payment(call("7.00"))
        .await
        .unwrap()
        .into_inner();
    clock.advance(Duration::from_secs(3601));
    let err = client.create_payment(call("7.00")).await.unwrap_err();
    assert_condition(&err, Code::FailedPrecondition, "KEY_EXPIRED");
    let info = err.get_details_error_info().unwrap();
    let op = effects.lock().unwrap()[0].clone();
    assert_eq!(info.metadata["operation_id"], op);
    assert_eq!(info.metadata["biz_no"], paid.payment_id);
    // The client half reads it as a typed answer.
    let expired = idem_client::tonic::key_expired(&err).expect("KEY_EXPIRED");
    assert_eq!(expired.biz_no.as_deref(), Some(paid.payment_id.as_str()));
    assert_eq!(expired.operation_id.as_deref(), Some(op.as_str()));
    assert_eq!(info.metadata["response_status"], "200");
    for time in ["completed_at", "expired_at", "remember_until"] {
        assert!(
            info.metadata[time].ends_with('Z'),
            "{time}: {:?}",
            info.metadata
        );
    }
    assert_eq!(
        effects.lock().unwrap().len(),
        1,
        "the method did not run again"
    );
    let other = client.create_payment(call("8.00")).await.unwrap_err();
    assert_condition(&other, Code::FailedPrecondition, "KEY_REUSED");
    clock.advance(Duration::from_secs(36_000));
    client.create_payment(call("8.00")).await.unwrap();
    assert_eq!(effects.lock().unwrap().len(), 2, "a new operation");
}

/// Duplicates of a call in flight wait for it (`wait = "10s"`) instead of `ABORTED`, and get its
/// answer, replayed; the method runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_wait_for_the_call_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let store = idem::SqliteStore::open(dir.path().join("idem.db"))
        .await
        .unwrap();
    idem::store::Store::migrate(&store).await.unwrap();
    let idem = tenant_scope(Idem::new(store));
    let probe = Probe {
        idem: idem.clone(),
        effects: Arc::default(),
        after_effect: Duration::from_millis(500),
    };
    let effects = probe.effects.clone();
    let client = serve_probe(probe).await;
    let key = unique("grpc_wait");
    let call = {
        let key = key.clone();
        move || with_key(payment("7.00"), Some(&key), &[("x-tenant-id", "acme")])
    };
    let first = tokio::spawn({
        let (mut client, request) = (client.clone(), call());
        async move { client.create_payment(request).await }
    });
    while effects.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let duplicates: Vec<_> = (0..5)
        .map(|_| {
            let (mut client, request) = (client.clone(), call());
            tokio::spawn(async move { client.create_payment(request).await })
        })
        .collect();
    let first = first.await.unwrap().unwrap();
    assert!(!replayed(first.metadata()));
    let first = first.into_inner();
    for d in duplicates {
        let answer = d.await.unwrap().expect("waited, not ABORTED");
        assert!(replayed(answer.metadata()));
        assert_eq!(answer.into_inner(), first);
    }
    assert_eq!(effects.lock().unwrap().len(), 1, "the method ran once");
    assert_eq!(idem.waiting(), 0);
}

/// A store that does not answer (nothing listens on its port): `UNAVAILABLE` with a
/// `RetryInfo`, the method not run; a method that fails open runs unprotected and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_is_unavailable_with_retry_info() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy(&format!("postgres://app:app@127.0.0.1:{port}/appdb"))
        .unwrap();
    let probe = Probe {
        idem: tenant_scope(Idem::new(idem::PostgresStore::from_pool(pool)))
            .with_store_timeout(Duration::from_millis(500)),
        effects: Arc::default(),
        after_effect: Duration::ZERO,
    };
    let effects = probe.effects.clone();
    let mut client = serve_probe(probe).await;
    let err = client
        .create_payment(with_key(
            payment("7.00"),
            Some("k-1"),
            &[("x-tenant-id", "acme")],
        ))
        .await
        .unwrap_err();
    assert_condition(&err, Code::Unavailable, "STORE_UNAVAILABLE");
    assert!(err.get_details_retry_info().unwrap().retry_delay.is_some());
    assert!(effects.lock().unwrap().is_empty(), "the method did not run");

    let open = client
        .create_refund(with_key(CreateRefundRequest::default(), Some("k-1"), &[]))
        .await
        .unwrap();
    assert_eq!(
        open.metadata().get("idempotency-status").unwrap(),
        "unprotected"
    );
    assert_eq!(*effects.lock().unwrap(), ["refund"]);
}

/// A method that panics after its effect: the call fails, the record keeps its operation id, and
/// the retry runs at once under that same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_method_keeps_its_operation_id() {
    let probe = Probe {
        idem: Idem::new(idem::MemoryStore::new()),
        effects: Arc::default(),
        after_effect: Duration::ZERO,
    };
    let effects = probe.effects.clone();
    let mut client = serve_probe(probe).await;
    let key = unique("grpc_panic");
    let event = || with_key(RecordEventRequest::default(), Some(&key), &[]);
    let failed = client.record_event(event()).await;
    assert!(failed.is_err(), "{failed:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let retry = client.record_event(event()).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "not after the 5 s lease"
    );
    assert!(!replayed(retry.metadata()));
    let effects = effects.lock().unwrap().clone();
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(effects[0], effects[1], "one operation id for both runs");
    assert_eq!(retry.into_inner().event_id, effects[0]);
}

/// A second service of the same proto in the same module, whose `create_payment` takes the
/// default operation too (`module::create_payment`, the same name as `Probe`'s).
struct Twin {
    idem: Idem,
}

impl AsIdem for Twin {
    fn as_idem(&self) -> &Idem {
        &self.idem
    }
}

#[tonic::async_trait]
impl Payments for Twin {
    #[idempotent(scope = default, ttl = "1h", lease = "5s")]
    async fn create_payment(
        &self,
        _request: Request<CreatePaymentRequest>,
    ) -> Result<tonic::Response<Payment>, Status> {
        Ok(tonic::Response::new(Payment {
            payment_id: "pay_twin".to_owned(),
            ..Default::default()
        }))
    }

    async fn create_refund(
        &self,
        _: Request<CreateRefundRequest>,
    ) -> Result<tonic::Response<Refund>, Status> {
        Err(Status::unimplemented("twin"))
    }

    async fn record_event(
        &self,
        _: Request<RecordEventRequest>,
    ) -> Result<tonic::Response<Event>, Status> {
        Err(Status::unimplemented("twin"))
    }

    async fn get_payment(
        &self,
        _: Request<GetPaymentRequest>,
    ) -> Result<tonic::Response<Payment>, Status> {
        Err(Status::unimplemented("twin"))
    }

    async fn get_stats(
        &self,
        _: Request<GetStatsRequest>,
    ) -> Result<tonic::Response<Stats>, Status> {
        Err(Status::unimplemented("twin"))
    }
}

/// One key sent to two services' methods that share a default operation name: the second is
/// refused as a reused key, never answered with the first service's payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_with_one_method_name_do_not_share_answers() {
    let idem = tenant_scope(Idem::new(idem::MemoryStore::new()));
    let probe = Probe {
        idem: idem.clone(),
        effects: Arc::default(),
        after_effect: Duration::ZERO,
    };
    let twin = Twin { idem };
    let call = || {
        let mut request = Request::new(payment("10.00"));
        request
            .metadata_mut()
            .insert("idempotency-key", MetadataValue::from_static("k-twin"));
        request
            .metadata_mut()
            .insert("x-tenant-id", MetadataValue::from_static("acme"));
        request
    };
    let first = Payments::create_payment(&probe, call()).await.unwrap();
    assert!(first.get_ref().payment_id.starts_with("pay_"));
    let again = Payments::create_payment(&probe, call()).await.unwrap();
    assert_eq!(again.get_ref().payment_id, first.get_ref().payment_id);
    let other = Payments::create_payment(&twin, call()).await.unwrap_err();
    assert_eq!(other.code(), Code::FailedPrecondition, "{other:?}");
}
