use idem::Fingerprint;

#[derive(Fingerprint, serde::Deserialize)]
enum Method {
    #[serde(alias = "card")]
    Card,
    #[serde(rename(serialize = "bank", deserialize = "transfer"))]
    Bank,
    Cash,
}

#[derive(Fingerprint, serde::Deserialize)]
#[serde(rename_all(deserialize = "lowercase"))]
enum Speed {
    Fast,
    Slow,
}

fn main() {}
