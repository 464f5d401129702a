use idem::Fingerprint;

#[derive(Fingerprint)]
struct Quote {
    #[fingerprint(float)]
    price: u64,
}

fn main() {}
