use axum::Json;
use axum::http::StatusCode;
use idem::{Fingerprint, Snapshot, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: u64,
    currency: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
}

#[idempotent(scope = global, remember = "3d")]
async fn create_payment(Json(req): Json<CreatePayment>) -> (StatusCode, Json<Payment>) {
    let id = format!("pay_{}_{}", req.amount, req.currency);
    (StatusCode::CREATED, Json(Payment { id }))
}

fn main() {
    let _ = create_payment;
}
