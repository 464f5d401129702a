use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[fingerprint(env, include)]
    client_ip: String,
}

fn main() {}
