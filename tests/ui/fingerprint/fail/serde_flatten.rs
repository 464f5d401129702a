use idem::Fingerprint;

#[derive(Fingerprint)]
struct Money {
    amount: u64,
    currency: String,
}

#[derive(Fingerprint)]
struct CreatePayment {
    #[serde(flatten)]
    money: Money,
    customer: String,
}

fn main() {}
