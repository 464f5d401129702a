//! The atomic mode: `transaction = tx` with a typed store and with `AnySql`, under every
//! contract.
use axum::Json;
use axum::http::StatusCode;
use idem::{Fingerprint, Snapshot, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: u64,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
}

async fn find_payment(id: String) -> Json<Payment> {
    Json(Payment { id })
}

#[idempotent(scope = global, transaction = tx)]
async fn create_payment(
    mut tx: idem::Tx<idem::SqliteStore>,
    Json(req): Json<CreatePayment>,
) -> Result<(StatusCode, Json<Payment>), StatusCode> {
    sqlx::query("INSERT INTO payments (amount) VALUES (?)")
        .bind(req.amount as i64)
        .execute(&mut *tx)
        .await
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    let id = format!("pay_{}", req.amount);
    Ok((StatusCode::CREATED, Json(Payment { id })))
}

#[idempotent(scope = global, transaction = tx, contract = "latest_state", lookup = find_payment)]
async fn create_latest(
    Json(req): Json<CreatePayment>,
    tx: idem::Tx<idem::AnySql>,
) -> (StatusCode, Json<Payment>) {
    match &*tx {
        idem::SqlTx::Sqlite(_) => {}
        _ => {}
    }
    let id = format!("pay_{}", req.amount);
    (StatusCode::CREATED, Json(Payment { id }))
}

fn main() {
    let _: axum::Router = axum::Router::new()
        .route("/a", axum::routing::post(create_payment))
        .route("/b", axum::routing::post(create_latest))
        .with_state(idem::Idem::new(idem::MemoryStore::new()));
}
