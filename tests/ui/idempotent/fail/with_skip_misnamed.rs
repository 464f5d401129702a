use axum::Json;
use axum::extract::Query;
use idem::{Fingerprint, Snapshot, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct Refund {
    amount: u64,
}

#[derive(serde::Deserialize, Fingerprint)]
struct Options {
    dry_run: Option<bool>,
}

#[derive(serde::Serialize, Snapshot)]
struct Receipt {
    #[snapshot(biz_no)]
    id: String,
}

#[idempotent(scope = global, fingerprint(with = [region], skip = [req]))]
async fn refund(Json(req): Json<Refund>) -> Json<Receipt> {
    Json(Receipt { id: format!("re_{}", req.amount) })
}

#[idempotent(scope = global, fingerprint(with = [options], skip = [options]))]
async fn both(Query(options): Query<Options>, Json(req): Json<Refund>) -> Json<Receipt> {
    Json(Receipt { id: format!("re_{}_{:?}", req.amount, options.dry_run) })
}

#[idempotent(scope = global, fingerprint(skip = []))]
async fn empty(Json(req): Json<Refund>) -> Json<Receipt> {
    Json(Receipt { id: format!("re_{}", req.amount) })
}

fn main() {
    let _ = (refund, both, empty);
}
