//! `--front actix`: the payment of the axum routes on actix-web, `POST /bare` (the handler
//! alone) and `POST /idem` (under `#[idempotent(scope = global, contract = "exact_replay")]`,
//! `idem::actix`), parsed with actix's own `web::Json`.

use std::net::TcpListener;

use actix_web::http::StatusCode;
use actix_web::{App, HttpServer, web};
use idem::Idem;
use idem::actix::idempotent;

use super::BoxError;
use super::app::{self, CreatePayment, Payment};

async fn bare(req: web::Json<CreatePayment>) -> (web::Json<Payment>, StatusCode) {
    (
        web::Json(app::payment(req.into_inner())),
        StatusCode::CREATED,
    )
}

#[idempotent(scope = global, contract = "exact_replay")]
async fn idem_payment(req: web::Json<CreatePayment>) -> (web::Json<Payment>, StatusCode) {
    (
        web::Json(app::payment(req.into_inner())),
        StatusCode::CREATED,
    )
}

/// Serves both routes on `listener` with `workers` workers (each a thread with a runtime of
/// its own) over `idem`, until the process ends.
pub async fn serve(listener: TcpListener, workers: usize, idem: Idem) -> Result<(), BoxError> {
    HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(idem.clone()))
            .app_data(idem::actix::json_config())
            .route("/bare", web::post().to(bare))
            .route("/idem", web::post().to(idem_payment))
    })
    .workers(workers)
    .listen(listener)?
    .run()
    .await?;
    Ok(())
}
