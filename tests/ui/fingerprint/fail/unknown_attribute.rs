use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    #[fingerprint(environment)]
    client_ip: String,
}

fn main() {}
