use actix_web::http::StatusCode;
use actix_web::web;
use idem::Fingerprint;
use idem::actix::idempotent;

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
async fn create_payment(req: web::Json<CreatePayment>) -> (web::Json<Receipt>, StatusCode) {
    let receipt = Receipt {
        id: "pay_1".into(),
        amount: req.amount,
    };
    (web::Json(receipt), StatusCode::CREATED)
}

fn main() {
    let _ = create_payment;
}
