use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[fingerprint(env)]
    #[fingerprint(env)]
    client_ip: String,
}

fn main() {}
