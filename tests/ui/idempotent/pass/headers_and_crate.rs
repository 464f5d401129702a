// `crate = ".."` for a renamed `idem`, and `headers = [..]` widening the replayed headers.
#![deny(warnings)]

extern crate idem as payments_idem;

use axum::Json;
use axum::http::StatusCode;

#[derive(serde::Deserialize, payments_idem::Fingerprint)]
#[fingerprint(crate = "::payments_idem")]
struct CreatePayment {
    amount: u64,
}

#[derive(serde::Serialize, payments_idem::Snapshot)]
#[snapshot(crate = "::payments_idem")]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
}

#[payments_idem::idempotent(
    crate = "::payments_idem",
    scope = global,
    headers = ["X-Request-Cost", "etag"],
    fingerprint(fields = [amount]),
)]
async fn create_payment(
    Json(req): Json<CreatePayment>,
) -> (StatusCode, [(&'static str, String); 1], Json<Payment>) {
    let id = format!("pay_{}", req.amount);
    (
        StatusCode::CREATED,
        [("x-request-cost", "3".to_owned())],
        Json(Payment { id }),
    )
}

fn main() {
    let _router: axum::Router = axum::Router::new()
        .route("/payments", axum::routing::post(create_payment))
        .with_state(payments_idem::Idem::new(payments_idem::MemoryStore::new()));
}
