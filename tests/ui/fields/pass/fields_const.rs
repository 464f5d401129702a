// `fields!` is a constant expression: usable in `const` items, with a trailing comma, and with
// raw identifiers.
use idem::Fingerprint;
use idem::fingerprint::FieldMask;

#[derive(Fingerprint)]
struct CreatePayment {
    amount: u64,
    currency: String,
    r#type: String,
    #[fingerprint(env)]
    client_ip: String,
}

const IDENTITY: FieldMask = idem::fields!(CreatePayment: amount, r#type,);

fn main() {
    let p = CreatePayment {
        amount: 1,
        currency: "EUR".into(),
        r#type: "card".into(),
        client_ip: "1.2.3.4".into(),
    };
    assert_eq!(IDENTITY, idem::fields!(CreatePayment: r#type, amount));
    assert_eq!(
        p.fingerprint_fields(IDENTITY),
        idem::RequestHash::of_bytes(br#"{"amount":1,"type":"card"}"#)
    );
}
