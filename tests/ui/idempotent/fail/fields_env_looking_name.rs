use axum::Json;
use axum::http::StatusCode;
use idem::{Fingerprint, Snapshot, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct CreatePayment {
    amount: u64,
    currency: String,
    #[fingerprint(env)]
    client_ip: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
}

#[idempotent(scope = global, fingerprint(fields = [amount, client_ip]))]
async fn create_payment(Json(req): Json<CreatePayment>) -> (StatusCode, Json<Payment>) {
    let id = format!("pay_{}_{}_{}", req.amount, req.currency, req.client_ip);
    (StatusCode::CREATED, Json(Payment { id }))
}

fn main() {
    let _ = create_payment;
}
