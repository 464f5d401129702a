use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[fingerprint(env)]
    client_ip: String,
}

fn main() {
    let _ = idem::fields!(CreatePayment: amount, client_ip);
}
