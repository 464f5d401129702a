#[derive(serde::Serialize, idem::Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    id: String,
    #[snapshot(biz_no)]
    order_no: String,
    amount: u64,
}

fn main() {}
