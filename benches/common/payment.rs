//! The request both fingerprint benchmarks measure (`benches/fingerprint.rs`,
//! `benches/fingerprint_count.rs`).

use std::collections::BTreeMap;

use idem::Fingerprint;
use rust_decimal::Decimal;
use serde::Serialize;

/// An 8-field payment request: 7 identity fields and one environment field.
#[derive(Fingerprint, Serialize)]
pub struct CreatePayment {
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

pub fn request() -> CreatePayment {
    CreatePayment {
        amount: Decimal::new(199_900, 2),
        currency: "EUR".into(),
        customer_id: "cus_9s6XKzkNRiz8i3".into(),
        order_id: "ord_2026_11_30_000184".into(),
        description: Some("Annual plan, seat 4 of 10".into()),
        capture: true,
        metadata: BTreeMap::from([
            ("campaign".to_owned(), "winter".to_owned()),
            ("channel".to_owned(), "web".to_owned()),
        ]),
        client_ip: "203.0.113.7".into(),
    }
}

/// The run-time spec that canonicalizes `serde_json::to_value(&request())` to the derive's bytes.
pub fn spec() -> idem::json::Spec {
    idem::json::Spec::from_json_str(
        r#"{"amount":"decimal","currency":"any","customer_id":"any","order_id":"any",
            "description":"any","capture":"any","metadata":{"map":"any"},"client_ip":"env"}"#,
    )
    .expect("valid spec")
}
