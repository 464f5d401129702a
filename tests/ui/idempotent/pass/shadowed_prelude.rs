// Generated code names only absolute paths and `__idem_` locals: user items called `Result`,
// `Option`, `String`, `Box`, `Vec`, `Send`, `core`, `std` (and a module without a prelude)
// change nothing.
#![allow(non_camel_case_types, dead_code)]

use axum::http::StatusCode;

#[derive(serde::Deserialize, idem::Fingerprint)]
pub struct CreatePayment {
    pub amount: u64,
}

#[derive(serde::Serialize, idem::Snapshot)]
pub struct Payment {
    #[snapshot(biz_no)]
    pub id: ::std::string::String,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Failed;

impl ::core::convert::From<idem::IdempotencyError> for Failed {
    fn from(_: idem::IdempotencyError) -> Self {
        Failed
    }
}

mod shadowing {
    use super::{CreatePayment, Failed, Payment, StatusCode};
    use axum::Json;
    use idem::idempotent;

    pub struct Result;
    pub struct Option;
    pub struct String;
    pub struct Box;
    pub struct Vec;
    pub struct Send;
    pub struct Future;
    pub struct Duration;
    pub mod core {}
    pub mod std {}

    #[idempotent(scope = [header("X-Tenant-Id"), "static"], fingerprint(fields = [amount]))]
    pub async fn create(Json(req): Json<CreatePayment>) -> (StatusCode, Json<Payment>) {
        let id = ::std::format!("pay_{}", req.amount);
        (StatusCode::CREATED, Json(Payment { id }))
    }

    #[idempotent(store = idem, key = key, scope = global, operation = "payments.consume", ttl = "1d")]
    pub async fn consume(
        idem: ::std::sync::Arc<idem::Idem>,
        req: CreatePayment,
        key: ::std::string::String,
    ) -> ::core::result::Result<u64, Failed> {
        let _ = (&idem, key);
        ::core::result::Result::Ok(req.amount)
    }
}

#[no_implicit_prelude]
mod no_prelude {
    use ::axum::Json;
    use ::axum::http::StatusCode;

    #[::idem::idempotent(scope = default, contract = "suppress_only")]
    pub async fn create(
        Json(req): Json<super::CreatePayment>,
    ) -> (StatusCode, Json<super::Payment>) {
        let id = ::std::format!("pay_{}", req.amount);
        (StatusCode::CREATED, Json(super::Payment { id }))
    }
}

fn main() {
    let _router: axum::Router = axum::Router::new()
        .route("/a", axum::routing::post(shadowing::create))
        .route("/b", axum::routing::post(no_prelude::create))
        .with_state(idem::Idem::new(idem::MemoryStore::new()));
    let _ = shadowing::consume;
}
