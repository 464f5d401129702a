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

#[idempotent(scope = global, transaction = tx)]
async fn create_payment(
    tx: idem::Tx<idem::MemoryStore>,
    Json(req): Json<CreatePayment>,
) -> (StatusCode, Json<Payment>) {
    let _ = tx;
    let id = format!("pay_{}", req.amount);
    (StatusCode::CREATED, Json(Payment { id }))
}

fn main() {
    let _ = create_payment;
}
