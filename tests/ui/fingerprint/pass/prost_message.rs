// A prost message with every field shape, its oneof, and a response with `from_biz_no`.
#![deny(warnings)]

#[derive(Clone, PartialEq, prost::Message, idem::Fingerprint)]
pub struct CreatePayment {
    #[prost(string, tag = "1")]
    pub order_id: String,
    #[prost(bytes = "bytes", tag = "2")]
    pub memo: prost::bytes::Bytes,
    #[prost(map = "uint32, message", tag = "3")]
    pub lines: std::collections::HashMap<u32, Line>,
    #[prost(message, optional, boxed, tag = "4")]
    pub parent: Option<Box<CreatePayment>>,
    #[prost(oneof = "create_payment::Method", tags = "5, 6")]
    pub method: Option<create_payment::Method>,
    #[prost(string, tag = "7")]
    #[fingerprint(env)]
    pub client_ip: String,
    #[prost(double, repeated, tag = "8")]
    #[fingerprint(float)]
    pub weights: Vec<f64>,
}

#[derive(Clone, PartialEq, prost::Message, idem::Fingerprint)]
pub struct Line {
    #[prost(string, tag = "1")]
    pub sku: String,
}

pub mod create_payment {
    #[derive(Clone, PartialEq, prost::Oneof, idem::Fingerprint)]
    pub enum Method {
        #[prost(string, tag = "5")]
        Iban(String),
        #[prost(double, tag = "6")]
        #[fingerprint(float)]
        Points(f64),
    }
}

#[derive(Clone, PartialEq, prost::Message, idem::Snapshot)]
pub struct Payment {
    #[prost(string, tag = "1")]
    #[snapshot(biz_no)]
    pub payment_id: String,
    #[prost(int64, tag = "2")]
    pub amount_minor: i64,
}

fn main() {
    use idem::{Fingerprint, Snapshot};
    let _ = CreatePayment::default().fingerprint();
    let _ = Payment::from_biz_no("pay_1");
}
