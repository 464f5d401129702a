use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    currency: String,
}

fn main() {
    let _ = idem::fields!(CreatePayment: amount, currenc);
}
