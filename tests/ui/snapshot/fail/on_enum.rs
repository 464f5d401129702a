#[derive(serde::Serialize, idem::Snapshot)]
enum Payment {
    Card { id: String },
    Wire { id: String },
}

fn main() {}
