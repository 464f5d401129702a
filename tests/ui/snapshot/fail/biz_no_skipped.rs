#[derive(serde::Serialize, idem::Snapshot)]
struct Payment {
    #[snapshot(biz_no)]
    #[serde(skip_serializing_if = "String::is_empty")]
    id: String,
    amount: u64,
}

fn main() {}
