use actix_web::http::StatusCode;
use actix_web::web;
use idem::actix::idempotent;
use idem::{Fingerprint, Snapshot};

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

#[idempotent(scope = global)]
async fn create_payment(req: web::Query<CreatePayment>) -> (web::Json<Payment>, StatusCode) {
    let id = format!("pay_{}_{}", req.amount, req.currency);
    (web::Json(Payment { id }), StatusCode::CREATED)
}

fn main() {
    let _ = create_payment;
}
