// Wire names follow serde: `rename`, `rename(serialize = ..)`, `rename_all`, `rename_all_fields`,
// and a variant's own `rename_all`; members are sorted by wire name, not by Rust name.
use idem::Fingerprint;

#[derive(Fingerprint, serde::Serialize)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
struct Transfer {
    source_account: String,
    #[serde(rename = "AMOUNT_MINOR")]
    amount: u64,
    #[serde(rename(serialize = "0-first", deserialize = "ignored"))]
    z_last_in_rust: u8,
    #[serde(rename(deserialize = "only_deserialize"))]
    target_account: String,
}

#[derive(Fingerprint, serde::Serialize)]
#[serde(rename_all = "snake_case", rename_all_fields = "camelCase")]
enum Method {
    BankCard { card_token: String },
    #[serde(rename_all = "kebab-case")]
    WireTransfer { bank_code: String },
    #[serde(rename = "APPLE")]
    ApplePay(String),
}

fn main() {
    let t = Transfer {
        source_account: "A".into(),
        amount: 5,
        z_last_in_rust: 1,
        target_account: "B".into(),
    };
    assert_eq!(
        t.canonical_json(),
        r#"{"0-first":1,"AMOUNT_MINOR":5,"SOURCE-ACCOUNT":"A","TARGET-ACCOUNT":"B"}"#
    );
    assert_eq!(t.canonical_json(), serde_json::to_string(&sorted(&t)).unwrap());

    let card = Method::BankCard { card_token: "tok".into() };
    assert_eq!(card.canonical_json(), r#"{"bank_card":{"cardToken":"tok"}}"#);
    let wire = Method::WireTransfer { bank_code: "X".into() };
    assert_eq!(wire.canonical_json(), r#"{"wire_transfer":{"bank-code":"X"}}"#);
    assert_eq!(Method::ApplePay("p".into()).canonical_json(), r#"{"APPLE":"p"}"#);
    for m in [card, wire] {
        assert_eq!(m.canonical_json(), serde_json::to_string(&sorted(&m)).unwrap());
    }
}

/// serde's own output, with object members sorted (serde_json's `Value` map is a `BTreeMap`).
fn sorted<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap()
}
