use axum::Json;
use axum::http::StatusCode;
use idem::{Fingerprint, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: u64,
}

#[derive(serde::Serialize)]
struct Receipt {
    id: String,
    amount: u64,
}

#[idempotent(scope = global)]
async fn create_payment(Json(req): Json<CreatePayment>) -> (StatusCode, Json<Receipt>) {
    let receipt = Receipt {
        id: "pay_1".into(),
        amount: req.amount,
    };
    (StatusCode::CREATED, Json(receipt))
}

fn main() {
    let _ = create_payment;
}
