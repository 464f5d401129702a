use idem::Fingerprint;

#[derive(Fingerprint)]
#[fingerprint(rename_all = "camelCase")]
struct CreatePayment {
    amount: u64,
}

fn main() {}
