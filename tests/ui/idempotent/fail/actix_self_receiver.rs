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

struct Api;

impl Api {
    #[idempotent(scope = global)]
    async fn create_payment(&self, req: web::Json<CreatePayment>) -> (web::Json<Payment>, StatusCode) {
        let id = format!("pay_{}_{}", req.amount, req.currency);
        (web::Json(Payment { id }), StatusCode::CREATED)
    }
}

fn main() {
    let _ = Api::create_payment;
}
