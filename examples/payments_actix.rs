//! The payments API of `examples/payments.rs` on actix-web: the same routes, bodies, status
//! codes, headers, problem types, environment variables and defaults, on the same engine
//! (`idem::actix`), with payment creation in the atomic mode.
//!
//! ```sh
//! cargo run --example payments_actix --features actix   # http://127.0.0.1:3000, ./payments.db
//! ```
//!
//! The variables (`PAYMENTS_ADDR`, `DATABASE_URL`, `PAYMENTS_DELAY_MS`, `PAYMENTS_SETTLE_MS`,
//! `PAYMENTS_STORE_TIMEOUT_MS`, `PAYMENTS_ENCRYPTION_KEYS`, `PAYMENTS_CORS_ORIGINS`,
//! `PAYMENTS_LOG`) and the walk-through are those of `examples/payments.rs` (CORS through
//! actix-cors), and so is `GET /metrics`, with the same series; the business logic (`payments/model.rs`) and the
//! database (`payments/db.rs`) are the same files.

use actix_cors::Cors;
use actix_web::dev::Service;
use actix_web::middleware::Condition;
use actix_web::{App, HttpResponse, HttpServer, web};
use metrics_exporter_prometheus::PrometheusHandle;

#[path = "payments/api_actix.rs"]
mod api;
#[path = "payments/db.rs"]
mod db;
#[path = "payments/model.rs"]
mod model;
#[path = "payments/openapi.rs"]
mod openapi;
#[path = "payments/ops.rs"]
mod ops;
#[path = "payments/service.rs"]
mod service;

pub use service::{BoxError, Config};

/// Opens the store named by `database_url` as `examples/payments.rs` does, and returns what
/// [`configure`] serves.
pub async fn state(database_url: &str, config: Config) -> Result<model::App, BoxError> {
    service::open(database_url, config).await
}

/// The application of `state`: its handle and state as app data, JSON rejections as problems,
/// the routes and `GET /metrics` (every answer counted), behind a CORS middleware when
/// `state.config.cors_origins` names origins. Give it to `App::configure` in the `HttpServer`
/// factory.
pub fn configure(state: model::App) -> impl Fn(&mut web::ServiceConfig) + Clone {
    let metrics = ops::metrics_handle(state.config.metrics.as_ref());
    let document = description();
    move |cfg| {
        let origins = &state.config.cors_origins;
        let metrics = metrics.clone();
        cfg.app_data(web::Data::new(state.idem.clone()))
            .app_data(web::Data::new(state.clone()))
            .app_data(idem::actix::json_config())
            .service(
                web::scope("")
                    .wrap(Condition::new(!origins.is_empty(), cors(origins)))
                    .wrap_fn(|req, service| {
                        let method = req.method().clone();
                        let answer = service.call(req);
                        async move {
                            let answer = answer.await;
                            match &answer {
                                Ok(res) => ops::count_request(
                                    method.as_str(),
                                    res.request().match_pattern().as_deref(),
                                    res.status().as_u16(),
                                ),
                                Err(e) => ops::count_request(
                                    method.as_str(),
                                    None,
                                    e.as_response_error().status_code().as_u16(),
                                ),
                            }
                            answer
                        }
                    })
                    .configure(api::routes)
                    .route("/metrics", web::get().to(move || render(metrics.clone())))
                    .configure(|cfg| {
                        if let Some(document) = &document {
                            let document = document.clone();
                            cfg.route(
                                "/openapi.json",
                                web::get().to(move || serve_description(document.clone())),
                            );
                        }
                    }),
            );
    }
}

/// `GET /metrics`: the recorder's series in Prometheus' text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(openapi::Metrics)
)]
async fn render(metrics: PrometheusHandle) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ops::METRICS_CONTENT_TYPE)
        .body(metrics.render())
}

/// This server's API description (`payments/openapi.rs`), as JSON; `None` without
/// `--features utoipa`.
fn description() -> Option<String> {
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(
        api::create_payment,
        api::get_payment,
        api::create_refund,
        api::get_refund,
        api::track_event,
        api::stats,
        render,
        serve_description,
    ))]
    struct Paths;

    openapi::json(
        <Paths as utoipa::OpenApi>::openapi(),
        concat!(module_path!(), "::api"),
    )
}

/// `GET /openapi.json`: [`description`].
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses(openapi::Description)
)]
async fn serve_description(document: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(document)
}

/// The CORS middleware of `origins`: it answers preflights and exposes idem's headers to the
/// scripts of those origins (`idem::http::CORS_EXPOSE_HEADERS`).
fn cors(origins: &[String]) -> Cors {
    origins
        .iter()
        .fold(Cors::default(), |cors, origin| cors.allowed_origin(origin))
        .allowed_methods(["GET", "POST"])
        .allowed_headers(ops::allowed_headers())
        .expose_headers(ops::CORS_EXPOSE_HEADERS)
}

#[actix_web::main]
async fn main() -> std::process::ExitCode {
    service::exit_code(serve().await)
}

/// Reads the environment, opens the store, listens and serves; a start-up failure is one line.
async fn serve() -> Result<(), BoxError> {
    let (addr, url, config) = service::from_env("127.0.0.1:3000")?;
    let state = state(&url, config).await?;
    let app = configure(state);
    let server = HttpServer::new(move || App::new().configure(app.clone()))
        .bind(&addr)
        .map_err(|e| service::cannot_listen(&addr, &e))?;
    for bound in server.addrs() {
        eprintln!(
            "payments: listening on http://{bound} (store: {})",
            service::store_name(&url)
        );
    }
    server.run().await?;
    Ok(())
}
