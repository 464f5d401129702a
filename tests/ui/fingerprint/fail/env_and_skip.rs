use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[fingerprint(skip, env)]
    user_agent: String,
}

fn main() {}
