use std::collections::BTreeMap;
use idem::Fingerprint;
use rust_decimal::Decimal;
#[derive(Fingerprint)]
struct CreatePayment {
    amount: Decimal,
    currency: String,
    customer_id: String,
    order_id: String,
    description: Option<String>,
    capture: bool,
    metadata: BTreeMap<String, String>,
    #[fingerprint(env)]
    client_ip: String,
}
fn main() {
    let req = CreatePayment {
        amount: Decimal::new(1999_00, 2),
        currency: "EUR".into(),
        customer_id: "cus_9s6XKzkNRiz8i3".into(),
        order_id: "ord_2026_11_30_000184".into(),
        description: Some("Annual plan, seat 4 of 10".into()),
        capture: true,
        metadata: BTreeMap::from([("campaign".to_owned(), "winter".to_owned()), ("channel".to_owned(), "web".to_owned())]),
        client_ip: "203.0.113.7".into(),
    };
    let mode = std::env::args().nth(1).unwrap_or_default();
    let c = req.canonical_json();
    println!("{} bytes", c.len());
    let mut acc = 0u8;
    for _ in 0..200_000 {
        if mode == "floor" { acc ^= idem::RequestHash::of_bytes(std::hint::black_box(c.as_bytes())).as_bytes()[0]; }
        else { acc ^= std::hint::black_box(&req).fingerprint().as_bytes()[0]; }
    }
    println!("{acc}");
}
