use idem::Fingerprint;

struct Customer {
    id: String,
}

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    customer: Customer,
}

fn main() {}
