use idem::Fingerprint;

#[derive(Fingerprint)]
struct Pair(u64, #[fingerprint(env)] String);

fn main() {}
