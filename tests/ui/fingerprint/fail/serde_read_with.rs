use idem::Fingerprint;
use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer};

/// Trims: `" EUR"` is `"EUR"` to the handler, not to a raw body's spec.
fn trimmed<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    String::deserialize(d).map(|s| s.trim().to_owned())
}

mod upper {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        String::deserialize(d).map(|s| s.to_uppercase())
    }
}

#[derive(Deserialize, Fingerprint)]
struct Pay {
    #[serde(deserialize_with = "trimmed")]
    currency: String,
    #[serde(with = "upper")]
    country: String,
    /// idem's own reader reads as the `Decimal` spec does: accepted.
    #[serde(deserialize_with = "idem::deserialize::decimal")]
    amount: Decimal,
    /// Written by a function of the application's: accepted.
    #[serde(deserialize_with = "trimmed")]
    #[fingerprint(with = write_note)]
    note: String,
    /// Not hashed: accepted.
    #[serde(deserialize_with = "trimmed")]
    #[fingerprint(skip)]
    memo: String,
}

fn write_note(v: &String, w: &mut idem::fingerprint::CanonicalWriter<'_>) {
    w.str(v);
}

fn main() {}
