#[derive(serde::Serialize, idem::Snapshot)]
struct Payment {
    id: String,
    amount: u64,
}

fn main() {}
