use idem::Fingerprint;

#[derive(Fingerprint)]
#[serde(tag = "type")]
enum Method {
    Card { number: String },
    Transfer { iban: String },
}

fn main() {}
