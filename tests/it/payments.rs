//! The payments example (`examples/payments.rs`) end to end over HTTP: its router served on a
//! real TCP socket, spoken to by a minimal HTTP/1.1 client, on SQLite (a file in a temporary
//! directory), PostgreSQL and MariaDB/MySQL (when `IDEM_TEST_POSTGRES_URL` /
//! `IDEM_TEST_MYSQL_URL` are set; `scripts/test` starts the servers; under `CI=true` they must
//! be). Each test gets a database of its own (`Backend::database`), with the business tables and
//! the idempotency records in it.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "../../examples/payments.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
#[allow(clippy::module_inception)] // `payments::payments`: the example, in the module of its tests
pub(crate) mod payments;

// Each example is a crate of its own; here both are modules of this one, and load the files
// they share (db.rs, model.rs, service.rs) once each.
#[cfg(feature = "actix")]
#[path = "../../examples/payments_actix.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod payments_actix;

use payments::Config;

// Hostile input, on both fronts.
#[path = "payments_hostile.rs"]
mod hostile;

// The auditor's search of what the stores keep at rest, with encryption on and off.
#[path = "payments_audit.rs"]
mod audit;
use hostile::*;

// ---------------------------------------------------------------- fixtures

use crate::backends::{Backend, Database, backend_tests, on_database};
use crate::servers::unique;

struct Server {
    addr: SocketAddr,
    /// The example's `DATABASE_URL` and what it is on.
    db: Database,
}

impl Server {
    /// Runs `sql` on the example's database (the business tables and the idempotency records).
    async fn exec(&self, sql: &'static str) {
        let pool = self.db.pool().await;
        pool.execute(sql.to_owned()).await;
        pool.close().await;
    }

    /// The operation id of the idempotency record of client key `key` (unique across tests:
    /// letters, digits and `_`).
    async fn operation_id(&self, key: &str) -> String {
        let pool = self.db.pool().await;
        let table = self.db.backend.records_table();
        let id = pool
            .text(format!(
                "SELECT operation_id FROM {table} WHERE idem_key LIKE '%:{key}'"
            ))
            .await;
        pool.close().await;
        id
    }
}

/// Which of the two examples serves: `examples/payments.rs` (axum) or
/// `examples/payments_actix.rs` (actix-web). Every scenario runs against both: a black-box test
/// of one passes on the other.
#[derive(Debug, Clone, Copy)]
enum Front {
    Axum,
    #[cfg(feature = "actix")]
    Actix,
}

/// The example of `front` served on a database of its own with `config`, spoken to by
/// `scenario`; nothing when the backend's server is not configured.
async fn serve_with(
    front: Front,
    backend: Backend,
    config: Config,
    scenario: impl AsyncFnOnce(&Server),
) {
    let Some(db) = backend.database().await else {
        return;
    };
    let addr = match front {
        Front::Axum => {
            let router = payments::app(&db.url, config).await.unwrap();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
            addr
        }
        #[cfg(feature = "actix")]
        Front::Actix => {
            // The same file, compiled into the other example's module.
            let config = payments_actix::Config {
                delay: config.delay,
                settle: config.settle,
                store_timeout: config.store_timeout,
                encryption: config.encryption.clone(),
                cors_origins: config.cors_origins.clone(),
                metrics: config.metrics.clone(),
            };
            let state = payments_actix::state(&db.url, config).await.unwrap();
            let app = payments_actix::configure(state);
            let server =
                actix_web::HttpServer::new(move || actix_web::App::new().configure(app.clone()))
                    .workers(2)
                    .disable_signals()
                    .bind("127.0.0.1:0")
                    .unwrap();
            let addr = server.addrs()[0];
            tokio::spawn(server.run());
            addr
        }
    };
    scenario(&Server { addr, db }).await;
}

/// The default configuration, with the binary's Prometheus recorder for `GET /metrics` (the
/// example would install its own as the process's recorder: `crate::recorder` has).
pub(crate) fn default_config() -> Config {
    Config {
        metrics: Some(crate::recorder::installed().prometheus.clone()),
        ..Config::default()
    }
}

/// A handler that takes 1.5 s, so that a duplicate meets it in progress.
fn slow_handler() -> Config {
    Config {
        delay: Duration::from_millis(1500),
        ..default_config()
    }
}

/// Payments that settle after 1 s.
fn slow_settling() -> Config {
    Config {
        settle: Duration::from_millis(1000),
        ..default_config()
    }
}

/// The origin of the browser's scripts in the CORS scenario.
const ORIGIN: &str = "https://shop.example";

/// CORS for [`ORIGIN`] (and one more), with the slow handler: a duplicate meets it in progress.
fn cors_slow_handler() -> Config {
    Config {
        cors_origins: vec![ORIGIN.to_owned(), "http://localhost:8080".to_owned()],
        ..slow_handler()
    }
}

/// The runners of `backend_tests!` for one front: `serve`, `serve_slow_handler`,
/// `serve_slow_settling` over `$front`, and the scenarios run by each.
macro_rules! front_tests {
    ($front:ident) => {
        use super::*;

        async fn serve(backend: Backend, scenario: impl AsyncFnOnce(&Server)) {
            serve_with(Front::$front, backend, default_config(), scenario).await;
        }

        async fn serve_slow_handler(backend: Backend, scenario: impl AsyncFnOnce(&Server)) {
            serve_with(Front::$front, backend, slow_handler(), scenario).await;
        }

        async fn serve_slow_settling(backend: Backend, scenario: impl AsyncFnOnce(&Server)) {
            serve_with(Front::$front, backend, slow_settling(), scenario).await;
        }

        async fn serve_cors(backend: Backend, scenario: impl AsyncFnOnce(&Server)) {
            serve_with(Front::$front, backend, cors_slow_handler(), scenario).await;
        }

        backend_tests!(
            2,
            serve,
            [sqlite, postgres, mysql],
            create_and_replay,
            equivalent_requests_replay,
            key_reused_is_422,
            invalid_request_then_corrected_retry,
            processor_failure_is_stored_and_replayed,
            missing_key_is_400,
            events_suppress_only,
            scope_headers_separate_tenants,
            reads_and_404s,
            stats_count_business_rows,
            database_failure_is_503_and_the_retry_continues,
            deep_nesting_is_400_and_stores_nothing,
            invalid_keys_are_400,
            non_utf8_bytes_in_the_key_are_400,
            non_utf8_bodies_are_400_and_store_nothing,
            unknown_fields_are_not_hashed,
            metrics_are_served,
        );
        backend_tests!(
            2,
            serve_slow_handler,
            [sqlite, postgres, mysql],
            concurrent_duplicate_is_409,
        );
        backend_tests!(
            2,
            serve_slow_settling,
            [sqlite, postgres, mysql],
            refund_latest_state,
        );
        // What a browser sees does not depend on the store, nor does the API description.
        backend_tests!(2, serve_cors, [sqlite], cors_preflight_and_exposed_headers);
        #[cfg(feature = "utoipa")]
        backend_tests!(2, serve, [sqlite], the_description_covers_every_route);
    };
}

/// `examples/payments.rs`.
mod axum_front {
    front_tests!(Axum);
}

/// `examples/payments_actix.rs`.
#[cfg(feature = "actix")]
mod actix_front {
    front_tests!(Actix);

    backend_tests!(
        2,
        serve,
        [sqlite, postgres, mysql],
        oversized_bodies_are_413_and_store_nothing,
    );
}

// ---------------------------------------------------------------- a minimal HTTP/1.1 client

pub(crate) struct Response {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let mut found = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let first = found.next().map(|(_, v)| v.as_str());
        assert!(found.next().is_none(), "header {name} repeated");
        first
    }

    pub(crate) fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&self.body));
        })
    }

    /// Asserts a problem+json of `status` whose `type` ends with `/slug` (a base of the
    /// application's) or `#slug` (idem's default base).
    pub(crate) fn assert_problem(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let doc = self.json();
        let ty = doc["type"].as_str().unwrap();
        assert_eq!(ty.rsplit(['/', '#']).next(), Some(slug), "{ty}");
        assert_eq!(doc["status"], status);
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on a fresh connection (`Connection: close`); the body, if any, is JSON.
pub(crate) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        req.push_str("Content-Type: application/json\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or(""));
    exchange(addr, req.as_bytes()).await
}

/// Writes `request` (whole, as bytes) on a fresh connection and reads the response to its end.
pub(crate) async fn exchange(addr: SocketAddr, request: &[u8]) -> Response {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();

    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Response {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = std::str::from_utf8(&data[..eol]).unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 4 + size..];
    }
}

fn key_header(key: &str) -> [(&'static str, &str); 1] {
    [("Idempotency-Key", key)]
}

async fn post(s: &Server, path: &str, key: &str, body: Value) -> Response {
    send(
        s.addr,
        "POST",
        path,
        &key_header(key),
        Some(&body.to_string()),
    )
    .await
}

async fn get(s: &Server, path: &str) -> Response {
    send(s.addr, "GET", path, &[], None).await
}

async fn stats(s: &Server) -> Value {
    let resp = get(s, "/v1/stats").await;
    assert_eq!(resp.status, 200);
    resp.json()
}

fn payment_body(amount: Value) -> Value {
    json!({
        "amount": amount,
        "currency": "EUR",
        "customer_id": "cus_1",
        "order_id": "ord_42",
        "metadata": {"channel": "web", "cart": 3},
    })
}

async fn create_payment(s: &Server, key: &str, amount: Value) -> Response {
    post(s, "/v1/payments", key, payment_body(amount)).await
}

// ---------------------------------------------------------------- scenarios

/// The business write fails (its table is gone for a moment): `503` with `Retry-After`, and the
/// record is kept with its operation id — the retry writes the payment under that same id, the
/// one the business table is unique on, instead of starting a new operation.
async fn database_failure_is_503_and_the_retry_continues(s: &Server) {
    let key = unique("db-down");
    s.exec("ALTER TABLE payments RENAME TO payments_away").await;
    let failed = create_payment(s, &key, json!("100.00")).await;
    s.exec("ALTER TABLE payments_away RENAME TO payments").await;
    failed.assert_problem(503, "database-unavailable");
    assert_eq!(failed.header("retry-after"), Some("1"));
    assert_eq!(failed.json()["retry_after"], 1);
    let op = s.operation_id(&key).await;
    let retry = create_payment(s, &key, json!("100.00")).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert!(!retry.replayed());
    assert_eq!(
        retry.json()["payment_id"],
        format!("pay_{}", op.replace('-', "")),
        "the retry continued the first attempt's operation"
    );
    assert_eq!(stats(s).await["payments"], 1);
}

async fn create_and_replay(s: &Server) {
    let key = unique("create");
    let first = create_payment(s, &key, json!("100.00")).await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.replayed());
    assert_eq!(first.header("content-type"), Some("application/json"));
    let body = first.json();
    let id = body["payment_id"].as_str().unwrap();
    assert!(id.starts_with("pay_") && id.len() == 4 + 32, "{id}");
    assert_eq!(
        first.header("location"),
        Some(&*format!("/v1/payments/{id}"))
    );
    assert_eq!(
        body,
        json!({
            "payment_id": id, "status": "succeeded", "amount": "100.00", "currency": "EUR",
            "customer_id": "cus_1", "order_id": "ord_42",
        })
    );

    let replay = create_payment(s, &key, json!("100.00")).await;
    assert_eq!(replay.status, 201);
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body, "byte-identical body");
    assert_eq!(replay.header("location"), first.header("location"));
    assert_eq!(replay.header("content-type"), first.header("content-type"));
    assert_eq!(stats(s).await["payments"], 1);
}

async fn equivalent_requests_replay(s: &Server) {
    let key = unique("equivalent");
    let first = create_payment(s, &key, json!("100")).await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.json()["amount"], "100");
    for amount in [json!(100.00), json!("100.00"), json!(100), json!("1e2")] {
        let again = create_payment(s, &key, amount.clone()).await;
        assert_eq!(again.status, 201, "{amount}: {}", again.text());
        assert!(again.replayed(), "{amount}");
        assert_eq!(again.body, first.body, "{amount}");
    }
    // Environment fields differ on every attempt and are never hashed; member order and
    // whitespace are not part of the request either.
    let env = json!({
        "order_id": "ord_42", "customer_id": "cus_1", "currency": "EUR", "amount": 100,
        "metadata": {"cart": 3, "channel": "web"},
        "client_ip": "203.0.113.7", "timestamp": 1_764_000_000, "signature": "sig-a",
    });
    let again = post(s, "/v1/payments", &key, env).await;
    assert!(again.replayed() && again.status == 201, "{}", again.text());
    let env = json!({
        "amount": "100.0", "currency": "EUR", "customer_id": "cus_1", "order_id": "ord_42",
        "metadata": {"channel": "web", "cart": 3},
        "client_ip": "198.51.100.1", "timestamp": "2026-11-30T12:00:00Z", "signature": "sig-b",
    });
    let again = post(s, "/v1/payments", &key, env).await;
    assert!(again.replayed() && again.status == 201, "{}", again.text());
    assert_eq!(again.body, first.body);
    assert_eq!(stats(s).await["payments"], 1);
}

async fn key_reused_is_422(s: &Server) {
    let key = unique("reused");
    assert_eq!(create_payment(s, &key, json!("100.00")).await.status, 201);
    let other = create_payment(s, &key, json!("100.01")).await;
    other.assert_problem(422, "key-reused");
    assert!(!other.replayed());
    assert_eq!(other.json()["idempotency_key"], key.as_str());
    let mut body = payment_body(json!("100.00"));
    body["customer_id"] = json!("cus_2");
    post(s, "/v1/payments", &key, body)
        .await
        .assert_problem(422, "key-reused");
    let mut body = payment_body(json!("100.00"));
    body["metadata"]["cart"] = json!(4);
    post(s, "/v1/payments", &key, body)
        .await
        .assert_problem(422, "key-reused");
    assert_eq!(stats(s).await["payments"], 1);
}

async fn concurrent_duplicate_is_409(s: &Server) {
    let key = unique("concurrent");
    let (addr, k) = (s.addr, key.clone());
    let first = tokio::spawn(async move {
        let body = payment_body(json!("100.00")).to_string();
        send(addr, "POST", "/v1/payments", &key_header(&k), Some(&body)).await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let dup = create_payment(s, &key, json!("100.00")).await;
    dup.assert_problem(409, "in-progress");
    let retry_after: u64 = dup.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=10).contains(&retry_after), "{retry_after}");
    assert_eq!(dup.json()["retry_after"], retry_after);
    // Another payload under the running key is a 422, not a 409.
    create_payment(s, &key, json!("5"))
        .await
        .assert_problem(422, "key-reused");

    let first = first.await.unwrap();
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.replayed());
    let retry = create_payment(s, &key, json!("100.00")).await;
    assert_eq!((retry.status, retry.replayed()), (201, true));
    assert_eq!(retry.body, first.body);
    assert_eq!(stats(s).await["payments"], 1);
}

/// The names a comma-separated header lists, lowercase.
fn listed(r: &Response, header: &str) -> Vec<String> {
    r.header(header)
        .unwrap_or_else(|| panic!("no {header}: {:?}", r.headers))
        .split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .collect()
}

/// A browser's preflight from `origin` of a `POST` with an idempotency key and a JSON body.
async fn preflight(s: &Server, origin: &str) -> Response {
    let headers = [
        ("Origin", origin),
        ("Access-Control-Request-Method", "POST"),
        (
            "Access-Control-Request-Headers",
            "idempotency-key, content-type",
        ),
    ];
    send(s.addr, "OPTIONS", "/v1/payments", &headers, None).await
}

/// A browser's script on another origin: the preflight of a `POST` with an idempotency key is
/// allowed, and the cross-origin answers expose idem's headers to it (`Idempotent-Replayed` on
/// the replay, `Retry-After` on the `409`, `Location` on both `201`s). An origin not configured
/// is allowed nothing.
async fn cors_preflight_and_exposed_headers(s: &Server) {
    let allowed = preflight(s, ORIGIN).await;
    assert!(matches!(allowed.status, 200 | 204), "{}", allowed.status);
    assert_eq!(allowed.header("access-control-allow-origin"), Some(ORIGIN));
    let headers = listed(&allowed, "access-control-allow-headers");
    for name in idem::http::CORS_ALLOW_HEADERS
        .into_iter()
        .chain(["x-tenant-id"])
    {
        assert!(
            headers.iter().any(|h| h == name),
            "{name} not in {headers:?}"
        );
    }
    assert!(listed(&allowed, "access-control-allow-methods").contains(&"post".to_owned()));
    let refused = preflight(s, "https://elsewhere.example").await;
    assert_eq!(refused.header("access-control-allow-origin"), None);

    // The first request runs 1.5 s; a duplicate meets it in progress.
    let key = unique("cors");
    let cross_origin = |key: &str| {
        let body = payment_body(json!("100.00")).to_string();
        let (addr, key) = (s.addr, key.to_owned());
        async move {
            let headers = [("Origin", ORIGIN), ("Idempotency-Key", &*key)];
            send(addr, "POST", "/v1/payments", &headers, Some(&body)).await
        }
    };
    let first = tokio::spawn(cross_origin(&key));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let busy = cross_origin(&key).await;
    busy.assert_problem(409, "in-progress");
    assert!(busy.header("retry-after").is_some());
    assert_eq!(busy.header("access-control-allow-origin"), Some(ORIGIN));
    let exposed = listed(&busy, "access-control-expose-headers");
    for name in idem::http::CORS_EXPOSE_HEADERS {
        assert!(
            exposed.iter().any(|h| h == name),
            "{name} not in {exposed:?}"
        );
    }

    let first = first.await.unwrap();
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.header("access-control-allow-origin"), Some(ORIGIN));
    assert!(listed(&first, "access-control-expose-headers").contains(&"location".to_owned()));
    let replay = cross_origin(&key).await;
    assert_eq!((replay.status, replay.replayed()), (201, true));
    assert_eq!(replay.header("access-control-allow-origin"), Some(ORIGIN));
    let exposed = listed(&replay, "access-control-expose-headers");
    for name in ["idempotent-replayed", "retry-after", "location"] {
        assert!(
            exposed.iter().any(|h| h == name),
            "{name} not in {exposed:?}"
        );
    }
    assert_eq!(replay.header("location"), first.header("location"));
}

/// One sample of Prometheus' text format: its name, its labels, its value.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of a scrape (label values without escapes, as idem's and the example's are).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}').unwrap()),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once("=\"").unwrap();
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().unwrap_or_else(|e| panic!("{line}: {e}")),
            }
        })
        .collect()
}

/// The sum of the samples of `name` that carry every label of `labels`.
fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| s.value)
        .sum()
}

/// `GET /metrics` in Prometheus' text format.
async fn scrape(s: &Server) -> Vec<Sample> {
    let resp = get(s, "/metrics").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    samples(&resp.text())
}

/// `GET /metrics` after a fresh request, its replay and a `422`: idem's series of each, by
/// operation and backend, and the example's own count of HTTP answers. (Other tests of the
/// binary record into the same recorder: each figure is compared with the scrape before.)
async fn metrics_are_served(s: &Server) {
    let before = scrape(s).await;
    let key = unique("metrics");
    assert_eq!(create_payment(s, &key, json!("100.00")).await.status, 201);
    assert!(create_payment(s, &key, json!("100.00")).await.replayed());
    create_payment(s, &key, json!("7.00"))
        .await
        .assert_problem(422, "key-reused");
    let after = scrape(s).await;

    let backend = s.db.backend.name();
    let op = ("operation", "POST /v1/payments");
    let grew = |name: &str, labels: &[(&str, &str)]| {
        let grown = total(&after, name, labels) - total(&before, name, labels);
        assert!(grown >= 1.0, "{name}{labels:?} grew by {grown}");
    };
    for outcome in ["fresh", "replay", "key_reused"] {
        grew(
            "idem_requests_total",
            &[op, ("backend", backend), ("outcome", outcome)],
        );
    }
    grew(
        "idem_settlements_total",
        &[op, ("backend", backend), ("settlement", "stored")],
    );
    grew("idem_handler_seconds_count", &[op, ("backend", backend)]);
    grew(
        "idem_handler_seconds_bucket",
        &[op, ("backend", backend), ("le", "+Inf")],
    );
    grew(
        "idem_store_seconds_count",
        &[("backend", backend), ("statement", "claim")],
    );
    assert!(
        after
            .iter()
            .any(|s| s.name == "idem_in_flight" && s.labels.contains(&(op.0.into(), op.1.into()))),
        "no idem_in_flight of the operation"
    );
    for status in ["201", "422"] {
        grew(
            "payments_http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/v1/payments"),
                ("status", status),
            ],
        );
    }
}

async fn invalid_request_then_corrected_retry(s: &Server) {
    let key = unique("invalid");
    for (amount, currency) in [
        (json!(0), "EUR"),
        (json!("-5.00"), "EUR"),
        (json!("10"), "eur"),
        (json!("10"), "EURO"),
        (json!("10"), "E1R"),
    ] {
        let mut body = payment_body(amount);
        body["currency"] = json!(currency);
        let resp = post(s, "/v1/payments", &key, body).await;
        resp.assert_problem(400, "invalid-request");
        assert!(!resp.replayed());
    }
    // A body that does not deserialize: 400 (never axum's 422).
    let mut body = payment_body(json!("ten"));
    post(s, "/v1/payments", &key, body.clone())
        .await
        .assert_problem(400, "invalid-body");
    body.as_object_mut().unwrap().remove("currency");
    post(s, "/v1/payments", &key, body)
        .await
        .assert_problem(400, "invalid-body");
    assert_eq!(stats(s).await["payments"], 0);

    // Nothing was stored: the corrected retry with the same key runs.
    let fixed = create_payment(s, &key, json!("10.00")).await;
    assert_eq!(fixed.status, 201, "{}", fixed.text());
    assert!(!fixed.replayed());
    assert_eq!(stats(s).await["payments"], 1);
}

async fn processor_failure_is_stored_and_replayed(s: &Server) {
    let key = unique("xxx");
    let mut body = payment_body(json!("100.00"));
    body["currency"] = json!("XXX");
    let first = post(s, "/v1/payments", &key, body.clone()).await;
    first.assert_problem(500, "processor-failure");
    assert!(!first.replayed());
    let replay = post(s, "/v1/payments", &key, body).await;
    replay.assert_problem(500, "processor-failure");
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    // Stored: another payload under that key is refused.
    create_payment(s, &key, json!("100.00"))
        .await
        .assert_problem(422, "key-reused");
    assert_eq!(stats(s).await["payments"], 0);
}

async fn missing_key_is_400(s: &Server) {
    let body = payment_body(json!("100.00")).to_string();
    let resp = send(s.addr, "POST", "/v1/payments", &[], Some(&body)).await;
    resp.assert_problem(400, "missing-key");
    let resp = send(s.addr, "POST", "/v1/events", &[], Some(r#"{"name":"x"}"#)).await;
    resp.assert_problem(400, "missing-key");
    let resp = post(s, "/v1/payments", "", payment_body(json!("1"))).await;
    resp.assert_problem(400, "invalid-key");
    assert_eq!(stats(s).await["payments"], 0);
}

async fn refund_latest_state(s: &Server) {
    let payment = create_payment(s, &unique("pay"), json!("100.00"))
        .await
        .json();
    let pid = payment["payment_id"].as_str().unwrap();
    let path = format!("/v1/payments/{pid}/refunds");
    let key = unique("refund");

    let first = post(s, &path, &key, json!({"amount": "25.00"})).await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.replayed());
    let refund = first.json();
    let rid = refund["refund_id"].as_str().unwrap();
    assert!(rid.starts_with("re_"), "{rid}");
    assert_eq!(
        refund,
        json!({"refund_id": rid, "payment_id": pid, "amount": "25.00", "status": "pending"})
    );

    // A replay renders the current state: 200, still pending ...
    let early = post(s, &path, &key, json!({"amount": 25})).await;
    assert_eq!(
        (early.status, early.replayed()),
        (200, true),
        "{}",
        early.text()
    );
    assert_eq!(early.json()["status"], "pending");
    // ... and succeeded once PAYMENTS_SETTLE_MS have passed.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let late = post(s, &path, &key, json!({"amount": "25.00"})).await;
    assert_eq!((late.status, late.replayed()), (200, true));
    let mut settled = refund.clone();
    settled["status"] = json!("succeeded");
    assert_eq!(late.json(), settled);
    let read = get(s, &format!("/v1/refunds/{rid}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.json(), settled);

    post(s, &path, &key, json!({"amount": "30.00"}))
        .await
        .assert_problem(422, "key-reused");
    // Not stored (released): unknown payment, zero or excessive amount.
    let k = unique("refund-bad");
    post(
        s,
        "/v1/payments/pay_unknown/refunds",
        &k,
        json!({"amount": "1"}),
    )
    .await
    .assert_problem(404, "not-found");
    post(s, &path, &k, json!({"amount": "0"}))
        .await
        .assert_problem(400, "invalid-request");
    post(s, &path, &k, json!({"amount": "100.01"}))
        .await
        .assert_problem(400, "invalid-request");
    let ok = post(s, &path, &k, json!({"amount": "1"})).await;
    assert_eq!((ok.status, ok.replayed()), (201, false), "{}", ok.text());
    assert_eq!(stats(s).await["refunds"], 2);
}

async fn events_suppress_only(s: &Server) {
    let key = unique("event");
    let body = json!({"name": "checkout.viewed", "properties": {"step": 2}});
    let first = post(s, "/v1/events", &key, body.clone()).await;
    assert_eq!(first.status, 202, "{}", first.text());
    assert!(!first.replayed());
    let id = first.json()["event_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("evt_"), "{id}");
    assert_eq!(first.json(), json!({"event_id": id}));
    let before = stats(s).await;
    assert_eq!(before["events"], 1);

    let dup = post(s, "/v1/events", &key, body).await;
    assert_eq!((dup.status, dup.replayed()), (200, true), "{}", dup.text());
    assert_eq!(dup.json(), json!({"event_id": id}));
    assert_eq!(stats(s).await, before, "a duplicate records nothing");

    let other = json!({"name": "checkout.viewed", "properties": {"step": 3}});
    post(s, "/v1/events", &key, other)
        .await
        .assert_problem(422, "key-reused");
    assert_eq!(stats(s).await, before);
}

async fn scope_headers_separate_tenants(s: &Server) {
    let key = unique("scoped");
    let body = payment_body(json!("100.00")).to_string();
    let as_caller = |tenant: &'static str, user: Option<&'static str>| {
        let body = body.clone();
        let key = key.clone();
        let addr = s.addr;
        async move {
            let mut headers = vec![("Idempotency-Key", key.as_str()), ("X-Tenant-Id", tenant)];
            headers.extend(user.map(|u| ("X-User-Id", u)));
            send(addr, "POST", "/v1/payments", &headers, Some(&body)).await
        }
    };
    let a = as_caller("acme", None).await;
    let b = as_caller("globex", None).await;
    let a_user = as_caller("acme", Some("u-7")).await;
    for resp in [&a, &b, &a_user] {
        assert_eq!(
            (resp.status, resp.replayed()),
            (201, false),
            "{}",
            resp.text()
        );
    }
    let ids: Vec<Value> = [&a, &b, &a_user]
        .iter()
        .map(|r| r.json()["payment_id"].clone())
        .collect();
    assert!(ids[0] != ids[1] && ids[0] != ids[2] && ids[1] != ids[2]);
    let again = as_caller("acme", None).await;
    assert_eq!((again.status, again.replayed()), (201, true));
    assert_eq!(again.body, a.body);
    // No scope headers: yet another operation.
    let none = create_payment(s, &key, json!("100.00")).await;
    assert_eq!((none.status, none.replayed()), (201, false));
    assert_eq!(stats(s).await["payments"], 4);
}

async fn reads_and_404s(s: &Server) {
    let created = create_payment(s, &unique("read"), json!(12.5)).await;
    assert_eq!(created.status, 201);
    let path = created.header("location").unwrap().to_owned();
    let read = get(s, &path).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.json(), created.json());
    assert_eq!(read.json()["amount"], "12.5");
    get(s, "/v1/payments/pay_doesnotexist")
        .await
        .assert_problem(404, "not-found");
    get(s, "/v1/refunds/re_doesnotexist")
        .await
        .assert_problem(404, "not-found");
}

async fn stats_count_business_rows(s: &Server) {
    assert_eq!(
        stats(s).await,
        json!({"payments": 0, "refunds": 0, "events": 0})
    );
    let p = create_payment(s, &unique("s1"), json!("10")).await.json();
    create_payment(s, &unique("s2"), json!("20")).await;
    let path = format!("/v1/payments/{}/refunds", p["payment_id"].as_str().unwrap());
    assert_eq!(
        post(s, &path, &unique("s3"), json!({"amount": 5}))
            .await
            .status,
        201
    );
    let event = json!({"name": "signup"});
    assert_eq!(
        post(s, "/v1/events", &unique("s4"), event).await.status,
        202
    );
    assert_eq!(
        stats(s).await,
        json!({"payments": 2, "refunds": 1, "events": 1})
    );
}

/// `GET /openapi.json` (`--features utoipa`): every route the server answers, and on each
/// idempotent one what idem adds from its attribute; the reads are left as written.
#[cfg(feature = "utoipa")]
async fn the_description_covers_every_route(s: &Server) {
    let answer = get(s, "/openapi.json").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let document = answer.json();
    assert_eq!(document["openapi"], "3.1.0");
    // (method, path, contract, TTL in seconds) of every route; `None`: not idempotent.
    let routes = [
        ("post", "/v1/payments", Some(("exact_replay", 90 * 86_400))),
        ("get", "/v1/payments/{id}", None),
        (
            "post",
            "/v1/payments/{id}/refunds",
            Some(("latest_state", 90 * 86_400)),
        ),
        ("get", "/v1/refunds/{id}", None),
        ("post", "/v1/events", Some(("suppress_only", 6 * 3_600))),
        ("get", "/v1/stats", None),
        ("get", "/metrics", None),
        ("get", "/openapi.json", None),
    ];
    let paths = document["paths"].as_object().unwrap();
    let mut described: Vec<_> = paths
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().unwrap().keys();
            methods.map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    described.sort();
    let mut expected: Vec<_> = routes
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    expected.sort();
    assert_eq!(
        described, expected,
        "the described routes are the served ones"
    );
    let schemas = document["components"]["schemas"].as_object().unwrap();
    for (method, path, idempotency) in routes {
        let operation = &paths[path][method];
        let at = format!("{method} {path}");
        let responses = operation["responses"].as_object().unwrap();
        // Every answer's schema is in the components.
        for content in responses.values().filter_map(|r| r["content"].as_object()) {
            for media in content.values() {
                if let Some(target) = media["schema"]["$ref"].as_str() {
                    let name = target.trim_start_matches("#/components/schemas/");
                    assert!(schemas.contains_key(name), "{at}: {target} is not defined");
                }
            }
        }
        let parameters = operation["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let key = parameters.iter().find(|p| p["name"] == "Idempotency-Key");
        let Some((contract, ttl)) = idempotency else {
            assert!(key.is_none(), "{at}: a read takes no key");
            assert!(operation.get("x-idempotency").is_none(), "{at}");
            assert!(
                !responses.contains_key("409") && !responses.contains_key("422"),
                "{at}"
            );
            continue;
        };
        let key = key.unwrap_or_else(|| panic!("{at}: no Idempotency-Key parameter"));
        assert_eq!(
            (&key["in"], &key["required"]),
            (&json!("header"), &json!(true)),
            "{at}"
        );
        assert_eq!(
            key["schema"]["maxLength"], 257,
            "{at}: 255 characters, quoted"
        );
        for name in ["X-Tenant-Id", "X-User-Id"] {
            assert!(
                parameters.iter().any(|p| p["name"] == name),
                "{at}: no {name}"
            );
        }
        for status in ["400", "409", "422", "503"] {
            let problem = &responses[status]["content"]["application/problem+json"];
            assert!(
                problem["schema"]["$ref"].is_string(),
                "{at}: {status} is no problem"
            );
        }
        for status in ["409", "503"] {
            assert!(
                responses[status]["headers"]["Retry-After"].is_object(),
                "{at} {status}"
            );
        }
        let successes: Vec<_> = responses
            .iter()
            .filter(|(c, _)| c.starts_with('2'))
            .collect();
        assert!(!successes.is_empty(), "{at}: no success declared");
        for (status, response) in successes {
            let replayed = &response["headers"]["Idempotent-Replayed"];
            assert!(
                replayed.is_object(),
                "{at} {status}: no Idempotent-Replayed"
            );
        }
        let extension = &operation["x-idempotency"];
        assert_eq!(extension["contract"], contract, "{at}");
        assert_eq!(extension["ttl_seconds"], ttl, "{at}");
        assert_eq!(extension["key"]["name"], "Idempotency-Key", "{at}");
        assert_eq!(extension["scope"][0], r#"header("X-Tenant-Id")"#, "{at}");
        assert_eq!(operation["x-fern-idempotent"], true, "{at}");
    }
    let created = &paths["/v1/payments"]["post"]["responses"]["201"];
    assert!(
        created["headers"]["Location"].is_object(),
        "the user's header is kept"
    );
}

// ---------------------------------------------------------------- startup

/// What `cargo run --example payments` does first: open (create) the SQLite file and its tables.
#[tokio::test]
async fn app_creates_the_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    for (url, path) in [
        (path("plain.db"), path("plain.db")),
        (format!("sqlite://{}", path("scheme.db")), path("scheme.db")),
        // sqlx's own form: the parameter is not part of the file's name.
        (
            format!("sqlite://{}?mode=rwc", path("rwc.db")),
            path("rwc.db"),
        ),
    ] {
        assert!(!std::path::Path::new(&path).exists());
        let router = payments::app(&url, default_config()).await.unwrap();
        assert!(std::path::Path::new(&path).exists(), "{path}");
        // Starting again over the same file is fine (CREATE TABLE IF NOT EXISTS, migrations).
        let _again = payments::app(&url, default_config()).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        let resp = send(addr, "GET", "/v1/stats", &[], None).await;
        assert_eq!(resp.status, 200);
        assert_eq!(
            resp.json(),
            json!({"payments": 0, "refunds": 0, "events": 0})
        );
    }
}

#[test]
fn config_defaults() {
    let c = Config::default();
    assert_eq!(
        (c.delay, c.settle),
        (Duration::ZERO, Duration::from_millis(500))
    );
}

/// Several instances of the service starting at once on one fresh database (a deploy, a
/// restart of every replica): each creates the business tables if they are missing, and none
/// may fail. On PostgreSQL two concurrent `CREATE TABLE IF NOT EXISTS` of one table race (both
/// see no table; the loser fails with 42P07 "already exists" or a unique violation in
/// `pg_type`), which `tests/faults/chaos` caught with three processes of the example.
async fn instances_start_at_once(db: &Database) {
    let url = db.url.clone();
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { payments::app(&url, default_config()).await.map(drop) })
        })
        .collect();
    for start in starts {
        if let Err(e) = start.await.unwrap() {
            panic!("an instance failed to start: {e}");
        }
    }
}

backend_tests!(4, on_database, [postgres, mysql], instances_start_at_once,);

/// Runs the example binary `name` (built by `cargo test` next to this one,
/// `target/<profile>/examples/<name>`) with `env`, until it exits: its status, its standard
/// error and how long it ran. One that serves instead of stopping is killed after 30 s.
fn run_example(name: &str, env: &[(&str, &str)]) -> (std::process::ExitStatus, String, Duration) {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples")
        .join(name);
    let mut child = std::process::Command::new(&bin)
        .env_remove("DATABASE_URL")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!(
                "{} still runs with {env:?}: it does not stop at start, or was built before (`cargo build --all-features --examples`)",
                bin.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr, started.elapsed())
}

/// `PAYMENTS_ENCRYPTION_KEYS` malformed: the example stops at start with one line naming the
/// variable and what is wrong, and echoes no key material.
#[test]
fn malformed_encryption_keys_stop_the_example_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("payments.db").display().to_string();
    let short = "k1:c2VjcmV0LWtleS1tYXRlcmlhbA==";
    for (value, says) in [(short, "32 bytes"), ("c2VjcmV0LWtleQ==", "ID:BASE64")] {
        let (status, stderr, _) = run_example(
            "payments",
            &[
                ("PAYMENTS_ENCRYPTION_KEYS", value),
                ("DATABASE_URL", &db),
                ("PAYMENTS_ADDR", "127.0.0.1:0"),
            ],
        );
        assert!(!status.success());
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("PAYMENTS_ENCRYPTION_KEYS") && stderr.contains(says),
            "{stderr}"
        );
        assert!(!stderr.contains("c2VjcmV0LWtleS1tYXRlcmlhbA"), "{stderr}");
    }
}

/// `PAYMENTS_CORS_ORIGINS` malformed: each HTTP example stops at start with one line naming
/// the variable and the origin it cannot read.
#[test]
fn malformed_cors_origins_stop_the_example_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("payments.db").display().to_string();
    let mut names = vec!["payments"];
    #[cfg(feature = "actix")]
    names.push("payments_actix");
    for name in names {
        for origin in [
            "shop.example",
            "https://shop.example/",
            "https://shop.example/pay",
        ] {
            let (status, stderr, _) = run_example(
                name,
                &[
                    (
                        "PAYMENTS_CORS_ORIGINS",
                        &format!("https://ok.example, {origin}"),
                    ),
                    ("DATABASE_URL", &db),
                    ("PAYMENTS_ADDR", "127.0.0.1:0"),
                ],
            );
            assert_eq!(status.code(), Some(1), "{name}: {stderr}");
            assert_eq!(
                stderr,
                format!(
                    "error: PAYMENTS_CORS_ORIGINS: {origin:?} is not an origin \
                     (scheme://host[:port], e.g. https://shop.example)\n"
                ),
                "{name}"
            );
        }
    }
}

/// The serving examples, as their binaries are named.
fn serving_examples() -> Vec<&'static str> {
    let mut names = vec!["payments"];
    #[cfg(feature = "actix")]
    names.push("payments_actix");
    #[cfg(feature = "tonic")]
    names.push("payments_grpc");
    names
}

/// A start-up failure is one line on standard error saying what failed, why and what to do,
/// with exit code 1: a database that refuses the connection (at once, not after the pool's
/// timeout; the password masked), an address in use.
#[cfg(feature = "postgres")]
#[test]
fn startup_failures_are_one_line_saying_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("payments.db").display().to_string();
    for name in serving_examples() {
        let (status, stderr, took) = run_example(
            name,
            &[
                ("DATABASE_URL", "postgres://app:secret@127.0.0.1:1/x"),
                ("PAYMENTS_ADDR", "127.0.0.1:0"),
            ],
        );
        assert_eq!(status.code(), Some(1), "{name}: {stderr}");
        assert_eq!(
            stderr,
            "error: cannot reach the database at postgres://app:***@127.0.0.1:1/x: connection \
             refused (is the server running? check DATABASE_URL)\n",
            "{name}"
        );
        assert!(took < Duration::from_secs(4), "{name} took {took:?}");

        let (status, stderr, _) =
            run_example(name, &[("DATABASE_URL", &db), ("PAYMENTS_ADDR", &addr)]);
        assert_eq!(status.code(), Some(1), "{name}: {stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: cannot listen on {addr}: address in use (stop the other server or set \
                 PAYMENTS_ADDR=host:port)\n"
            ),
            "{name}"
        );
    }
}

/// `pay_client` against no server: one line at once saying the server refused the connection,
/// not the retry budget of every payment; `--help` prints its usage.
#[test]
fn pay_client_says_a_refused_connection_at_once() {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/pay_client");
    let started = std::time::Instant::now();
    let o = std::process::Command::new(&bin)
        .args(["--url", "http://127.0.0.1:1", "--payments", "1"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5), "{stderr}");
    assert_eq!(
        stderr,
        "pay_client: the server at http://127.0.0.1:1 refused the connection: is it running? \
         start it with `cargo run --example payments`, or pass --url\n"
    );
    let help = std::process::Command::new(&bin)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let usage = String::from_utf8_lossy(&help.stdout);
    assert!(usage.starts_with("usage: pay_client"), "{usage}");
    assert!(usage.contains("--concurrency C"), "{usage}");
}
