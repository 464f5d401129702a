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

#[idempotent(scope = global)]
async fn create_payment(
    mut tx: idem::Tx<idem::SqliteStore>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    let _ = &mut *tx;
    let id = format!("pay_{}", req.amount);
    (StatusCode::CREATED, Json(Payment { id }))
}

fn main() {
    let _ = create_payment;
}
