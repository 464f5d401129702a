use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    client_ip: String,
}

// The derive still implements the traits (with unreachable bodies), so code using the type
// reports nothing more: one mistake, one error.
fn main() {
    let p = CreatePayment {
        amount: 1,
        client_ip: "203.0.113.7".into(),
    };
    let _ = p.fingerprint();
    let _ = idem::fields!(CreatePayment: amount);
}
