use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[serde(rename = "amount")]
    amount_minor: u64,
}

fn main() {}
