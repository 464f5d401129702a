use axum::Json;
use axum::extract::Query;
use idem::{Fingerprint, Snapshot, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct Refund {
    amount: u64,
}

#[derive(serde::Deserialize)]
struct Options {
    dry_run: Option<bool>,
}

#[derive(serde::Serialize, Snapshot)]
struct Receipt {
    #[snapshot(biz_no)]
    id: String,
}

#[idempotent(scope = global)]
async fn refund(Query(options): Query<Options>, Json(req): Json<Refund>) -> Json<Receipt> {
    Json(Receipt { id: format!("re_{}_{:?}", req.amount, options.dry_run) })
}

fn main() {
    let _ = refund;
}
