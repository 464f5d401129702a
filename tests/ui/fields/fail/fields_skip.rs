use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[fingerprint(skip)]
    debug_note: String,
}

fn main() {
    let _ = idem::fields!(CreatePayment: amount, debug_note);
}
