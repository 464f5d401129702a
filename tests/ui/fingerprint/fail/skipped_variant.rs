use idem::Fingerprint;

#[derive(Fingerprint)]
enum Command {
    Pay { amount: u64 },
    #[serde(skip)]
    Internal,
}

fn main() {}
