//! What both HTTP servers of the example (axum's `examples/payments.rs`, actix-web's
//! `examples/payments_actix.rs`) put around the API and the gRPC server does not: the headers a
//! browser's cross-origin calls may send and read (CORS, for the origins of
//! `PAYMENTS_CORS_ORIGINS`), and the Prometheus recorder of `GET /metrics` with the example's
//! own series.
//!
//! The rule: the lists come from `idem::http`, plus the example's own scope headers, and the
//! recorder is the process's, installed once; each server only hands them to its framework.

use std::sync::OnceLock;
use std::time::Duration;

use idem::http::CORS_ALLOW_HEADERS;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub use idem::http::CORS_EXPOSE_HEADERS;

/// The headers that scope the example's keys (`X-Tenant-Id`, `X-User-Id`).
const SCOPE_HEADERS: [&str; 2] = ["x-tenant-id", "x-user-id"];

/// The request headers a browser's script may send: idem's (`Idempotency-Key`, `Content-Type`)
/// and the scope headers.
pub fn allowed_headers() -> impl Iterator<Item = &'static str> {
    CORS_ALLOW_HEADERS.into_iter().chain(SCOPE_HEADERS)
}

/// `payments_http_requests_total{method, route, status}`: the example's own series, every HTTP
/// answer by its method (`other` past the usual ones), route template (`unmatched` outside the
/// routes) and status code: replays, `409`s, `422`s, preflights and scrapes included.
pub const HTTP_REQUESTS: &str = "payments_http_requests_total";

/// The buckets of the `_seconds` histograms (idem's `idem_handler_seconds` and
/// `idem_store_seconds`), 1 ms to 10 s.
const SECONDS_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The Prometheus recorder's settings: the `_seconds` histograms as histograms with buckets
/// (`_bucket` series, which `histogram_quantile` reads and which add up across instances), not
/// the exporter's default summaries.
pub fn prometheus() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &SECONDS_BUCKETS)
        .expect("the buckets are not empty")
}

/// What `GET /metrics` renders: `given` (the handle of a Prometheus recorder that the process
/// installed itself, behind a fanout say), or else the recorder installed as the process's
/// recorder by the first call, which every later app of the process shares.
pub fn metrics_handle(given: Option<&PrometheusHandle>) -> PrometheusHandle {
    static INSTALLED: OnceLock<PrometheusHandle> = OnceLock::new();
    if let Some(handle) = given {
        return handle.clone();
    }
    INSTALLED
        .get_or_init(|| {
            let recorder = prometheus().build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!(
                    "another metrics recorder is installed: GET /metrics shows none of the series"
                );
            }
            // Histogram samples are folded into their buckets on each scrape, and every 5 s in
            // between, so that a process nobody scrapes does not keep them all.
            let upkeep = handle.clone();
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_secs(5));
                    upkeep.run_upkeep();
                }
            });
            handle
        })
        .clone()
}

/// The `Content-Type` of `GET /metrics`: Prometheus' text format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counts one answer in [`HTTP_REQUESTS`].
pub fn count_request(method: &str, route: Option<&str>, status: u16) {
    let method = match method {
        "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" => method,
        _ => "other",
    };
    metrics::counter!(
        HTTP_REQUESTS,
        "method" => method.to_owned(),
        "route" => route.unwrap_or("unmatched").to_owned(),
        "status" => status.to_string(),
    )
    .increment(1);
}
