use idem::Fingerprint;

#[derive(Fingerprint)]
#[serde(untagged)]
enum Amount {
    Minor(u64),
    Text(String),
}

fn main() {}
