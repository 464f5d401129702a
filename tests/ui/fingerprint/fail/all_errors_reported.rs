use idem::Fingerprint;

// Every mistake is reported in one compile, not one per attempt.
#[derive(Fingerprint)]
struct CreatePayment {
    amount: f64,
    timestamp: u64,
    #[fingerprint(secret)]
    token: String,
}

fn main() {}
