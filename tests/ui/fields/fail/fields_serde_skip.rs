use idem::Fingerprint;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    #[serde(skip)]
    cache_hint: u8,
}

fn main() {
    let _ = idem::fields!(CreatePayment: cache_hint);
}
