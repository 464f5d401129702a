use idem::Snapshot;

#[derive(serde::Serialize, Snapshot)]
struct Payment {
    #[snapshot(biz_no, key)]
    payment_id: String,
    status: String,
}

fn main() {}
