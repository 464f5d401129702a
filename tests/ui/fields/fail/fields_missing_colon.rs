use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
}

fn main() {
    let _ = idem::fields!(CreatePayment, amount);
}
