use idem::Fingerprint;

#[derive(Fingerprint)]
#[serde(rename_all = "camelCase")]
struct CreatePayment {
    amount: u64,
    #[serde(rename = "requestId")]
    correlation: String,
}

fn main() {}
