#[derive(serde::Serialize)]
struct PaymentId {
    prefix: &'static str,
    n: u64,
}

#[derive(serde::Serialize, idem::Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: PaymentId,
    amount: u64,
}

fn main() {}
