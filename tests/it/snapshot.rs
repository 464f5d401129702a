//! `#[derive(Snapshot)]`: the business number and the key fields a snapshot over the size limit
//! keeps (S11, S12), under serde's names.

use idem::Snapshot;
use serde_json::json;

#[derive(serde::Serialize, Snapshot)]
#[serde(rename_all = "camelCase")]
struct Payment {
    #[snapshot(biz_no)]
    payment_id: String,
    #[snapshot(key)]
    status: &'static str,
    #[snapshot(key)]
    #[serde(rename = "total")]
    amount_minor: u64,
    receipt_lines: Vec<String>,
}

fn payment() -> Payment {
    Payment {
        payment_id: "pay_1".into(),
        status: "succeeded",
        amount_minor: 10_000,
        receipt_lines: vec!["a very long receipt".into(); 3],
    }
}

#[test]
fn business_number_under_its_wire_name() {
    assert_eq!(Payment::BIZ_NO_FIELD, "paymentId");
    assert_eq!(payment().biz_no(), "pay_1");
}

#[test]
fn key_fields_under_their_wire_names() {
    assert_eq!(
        payment().key_fields(),
        vec![("status", json!("succeeded")), ("total", json!(10_000))]
    );
}

#[test]
fn no_key_fields_by_default() {
    #[derive(serde::Serialize, Snapshot)]
    struct Event {
        #[snapshot(biz_no)]
        event_id: u64,
    }
    let event = Event { event_id: 7 };
    assert_eq!(
        (Event::BIZ_NO_FIELD, event.biz_no()),
        ("event_id", "7".to_owned())
    );
    assert!(event.key_fields().is_empty());
}
