// `BIZ_NO_FIELD` is the serde wire name; generic structs get a `Display` bound only where the
// business number's type needs one.
#![deny(warnings)]

use idem::Snapshot;

#[derive(serde::Serialize, Snapshot)]
#[serde(rename_all = "camelCase")]
struct Order {
    #[snapshot(biz_no)]
    order_no: u64,
    total_cents: u64,
}

#[derive(serde::Serialize, Snapshot)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
struct Refund {
    #[serde(rename = "refundId")]
    #[snapshot(biz_no)]
    id: String,
}

#[derive(serde::Serialize, Snapshot)]
struct Page<T, Id> {
    items: Vec<T>,
    #[snapshot(biz_no)]
    #[serde(rename(serialize = "cursor", deserialize = "c"))]
    next: Id,
}

#[derive(serde::Serialize, Snapshot)]
struct Borrowed<'a> {
    #[snapshot(biz_no)]
    r#ref: &'a str,
}

fn main() {
    let order = Order {
        order_no: 42,
        total_cents: 100,
    };
    assert_eq!(order.biz_no(), "42");
    assert_eq!(Order::BIZ_NO_FIELD, "orderNo");
    assert_eq!(Order::BIZ_NO_FIELD, {
        let v = serde_json::to_value(&order).unwrap();
        v.as_object()
            .unwrap()
            .keys()
            .find(|k| k.starts_with("order"))
            .unwrap()
            .clone()
    });
    let refund = Refund { id: "re_1".into() };
    assert_eq!(
        (Refund::BIZ_NO_FIELD, refund.biz_no().as_str()),
        ("refundId", "re_1")
    );
    let page = Page {
        items: vec![1u8],
        next: 'z',
    };
    assert_eq!(
        (Page::<u8, char>::BIZ_NO_FIELD, page.biz_no()),
        ("cursor", "z".into())
    );
    assert_eq!(page.items.len(), 1);
    let b = Borrowed { r#ref: "x" };
    assert_eq!(
        (Borrowed::BIZ_NO_FIELD, b.biz_no()),
        ("ref", "x".to_owned())
    );
}
