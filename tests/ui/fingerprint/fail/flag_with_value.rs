use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[fingerprint(env = true)]
    client_ip: String,
}

fn main() {}
