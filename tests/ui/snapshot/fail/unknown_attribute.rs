#[derive(serde::Serialize, idem::Snapshot)]
struct Payment {
    #[snapshot(business_number)]
    id: String,
    amount: u64,
}

fn main() {}
