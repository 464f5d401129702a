use idem::Fingerprint;

#[derive(Fingerprint)]
#[fingerprint(crate = "not a path")]
struct CreatePayment {
    amount: u64,
}

fn main() {}
