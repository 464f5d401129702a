use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use idem::{Fingerprint, Snapshot, idempotent};

#[derive(serde::Deserialize, Fingerprint)]
struct Refund {
    amount: u64,
}

#[derive(serde::Serialize, Snapshot)]
struct Receipt {
    #[snapshot(biz_no)]
    id: String,
}

#[idempotent(scope = global)]
async fn refund(headers: HeaderMap, Json(req): Json<Refund>) -> (StatusCode, Json<Receipt>) {
    let id = format!("re_{}_{}", req.amount, headers.len());
    (StatusCode::CREATED, Json(Receipt { id }))
}

#[idempotent(scope = global)]
async fn unbound(_: HeaderMap, Json(req): Json<Refund>) -> Json<Receipt> {
    Json(Receipt { id: format!("re_{}", req.amount) })
}

#[idempotent(scope = global)]
async fn optional_query(
    q: Option<axum::extract::Query<std::collections::HashMap<String, String>>>,
    Json(req): Json<Refund>,
) -> Json<Receipt> {
    let _ = q;
    Json(Receipt { id: format!("re_{}", req.amount) })
}

mod on_actix {
    use actix_web::{HttpRequest, web};
    use idem::actix::idempotent;

    use super::{Receipt, Refund};

    #[idempotent(scope = global)]
    pub async fn refund(http: HttpRequest, req: web::Json<Refund>) -> web::Json<Receipt> {
        let _ = http.path();
        web::Json(Receipt { id: format!("re_{}", req.amount) })
    }
}

fn main() {
    let _ = (refund, unbound, optional_query, on_actix::refund);
}
