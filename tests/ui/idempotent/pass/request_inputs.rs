// Every argument of a handler is decided at compile time: path parameters and the query are
// hashed with the body unless they are in the key or the scope (or skipped); headers and the
// whole request are skipped, scoped or hashed by name. Axum and actix-web, routed.
#![deny(warnings)]

use axum::extract::{OriginalUri, Path, Query, RawQuery};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use idem::{Fingerprint, Idem, Snapshot};

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

/// The payment id and the query are hashed with the body.
#[idem::idempotent(scope = global)]
async fn refund(
    Path(payment_id): Path<String>,
    Query(options): Query<Options>,
    Json(req): Json<Refund>,
) -> (StatusCode, Json<Receipt>) {
    let id = format!("re_{payment_id}_{}_{:?}", req.amount, options.dry_run);
    (StatusCode::CREATED, Json(Receipt { id }))
}

/// The account is in the scope; the headers change nothing; the raw query and the URI are
/// hashed (a bound `Query` as well, through `Deref`).
#[idem::idempotent(scope = [account], fingerprint(skip = [headers]))]
async fn transfer(
    Path(account): Path<String>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    uri: OriginalUri,
    options: Query<Options>,
    Json(req): Json<Refund>,
) -> Json<Receipt> {
    let _ = (headers.len(), raw, uri.0.path(), options.dry_run);
    Json(Receipt {
        id: format!("tr_{account}_{}", req.amount),
    })
}

/// A query that changes nothing the handler does, said so.
#[idem::idempotent(scope = global, fingerprint(skip = [trace]))]
async fn tagged(Query(trace): Query<Options>, Json(req): Json<Refund>) -> Json<Receipt> {
    let _ = trace.dry_run;
    Json(Receipt {
        id: format!("t_{}", req.amount),
    })
}

mod on_actix {
    use actix_web::{HttpRequest, web};
    use idem::actix::idempotent;

    use super::{Options, Receipt, Refund};

    #[idempotent(scope = global, fingerprint(skip = [http]))]
    pub async fn refund(
        http: HttpRequest,
        path: web::Path<String>,
        query: web::Query<Options>,
        req: web::Json<Refund>,
    ) -> web::Json<Receipt> {
        let _ = (http.path(), query.dry_run);
        web::Json(Receipt {
            id: format!("re_{}_{}", path, req.amount),
        })
    }
}

fn main() {
    let _router: Router = Router::new()
        .route("/payments/{payment_id}/refunds", post(refund))
        .route("/accounts/{account}/transfers", post(transfer))
        .route("/tagged", post(tagged))
        .with_state(Idem::new(idem::MemoryStore::new()));
    let _ = actix_web::App::new().route("/p/{id}/refunds", actix_web::web::post().to(on_actix::refund));
}
