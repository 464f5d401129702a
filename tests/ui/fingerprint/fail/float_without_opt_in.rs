use idem::Fingerprint;

#[derive(Fingerprint)]
struct Quote {
    sku: String,
    prices: Option<Vec<f64>>,
}

fn main() {}
