//! The two paths agree: for generated instances of derived types, the derive's canonical text is
//! exactly the run-time canonicalization of `serde_json::to_value(&v)` under the spec the derive
//! exports.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use idem::{Fingerprint, json::ValueSpec};
use proptest::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;

#[derive(Debug, Clone, Fingerprint, Serialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    amount: Decimal,
    currency: String,
    note: Option<String>,
    customer_id: String,
    #[serde(rename = "ORDER")]
    order_id: u64,
    delta: i64,
    capture: bool,
    tags: BTreeSet<String>,
    codes: HashSet<i32>,
    labels: HashMap<String, String>,
    lines: Vec<Line>,
    kind: Kind,
    kinds: Vec<Kind>,
    #[fingerprint(base64)]
    raw: Vec<u8>,
    #[fingerprint(float)]
    ratio: f64,
    parent: Option<Box<Line>>,
    #[fingerprint(env)]
    client_ip: String,
    #[fingerprint(skip)]
    #[serde(skip)]
    cache_hint: u8,
}

#[derive(Debug, Clone, Fingerprint, Serialize)]
struct Line {
    sku: String,
    qty: u16,
    price: Decimal,
    discount: Option<Decimal>,
    attributes: BTreeMap<String, Option<String>>,
}

#[derive(Debug, Clone, Fingerprint, Serialize)]
enum Kind {
    Card,
    #[serde(rename = "bank_transfer")]
    Transfer {
        iban: String,
        reference: Option<String>,
    },
    Wallet(String),
    Split(u8, Decimal),
}

fn decimal() -> impl Strategy<Value = Decimal> {
    (any::<i64>(), 0u32..=12).prop_map(|(m, scale)| Decimal::new(m, scale))
}

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, control characters and quotes included.
    prop_oneof![any::<String>(), "[a-zA-Z0-9 _\"\\\\\u{0}-\u{1f}é€😀]{0,12}"]
}

fn line() -> impl Strategy<Value = Line> {
    (
        text(),
        any::<u16>(),
        decimal(),
        proptest::option::of(decimal()),
        proptest::collection::btree_map(text(), proptest::option::of(text()), 0..4),
    )
        .prop_map(|(sku, qty, price, discount, attributes)| Line {
            sku,
            qty,
            price,
            discount,
            attributes,
        })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Card),
        (text(), proptest::option::of(text()))
            .prop_map(|(iban, reference)| Kind::Transfer { iban, reference }),
        text().prop_map(Kind::Wallet),
        (any::<u8>(), decimal()).prop_map(|(a, b)| Kind::Split(a, b)),
    ]
}

fn finite_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        (-1_000_000i64..1_000_000, 0u32..6).prop_map(|(m, e)| m as f64 / 10f64.powi(e as i32)),
    ]
}

prop_compose! {
    fn order()(
        (amount, currency, note, customer_id, order_id, delta, capture) in
            (decimal(), text(), proptest::option::of(text()), text(), any::<u64>(), any::<i64>(), any::<bool>()),
        (tags, codes, labels) in (
            proptest::collection::btree_set(text(), 0..4),
            proptest::collection::hash_set(any::<i32>(), 0..4),
            // Inserted in generated (random) order.
            proptest::collection::vec((text(), text()), 0..4),
        ),
        (lines, kind, kinds, raw, ratio, parent, client_ip) in (
            proptest::collection::vec(line(), 0..3),
            kind(),
            proptest::collection::vec(kind(), 0..3),
            proptest::collection::vec(any::<u8>(), 0..20),
            finite_float(),
            proptest::option::of(line().prop_map(Box::new)),
            text(),
        ),
    ) -> Order {
        Order {
            amount, currency, note, customer_id, order_id, delta, capture, tags, codes,
            labels: labels.into_iter().collect(),
            lines, kind, kinds, raw, ratio, parent, client_ip, cache_hint: 7,
        }
    }
}

fn runtime_canonical<T: Fingerprint + Serialize>(v: &T) -> String {
    let ValueSpec::Object(spec) = T::value_spec() else {
        panic!("a struct exports an object spec");
    };
    let value = serde_json::to_value(v).expect("serializable");
    idem::json::canonicalize(&value, &spec).expect("canonicalizable")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn derive_and_runtime_paths_agree(order in order()) {
        let derived = order.canonical_json();
        prop_assert_eq!(&derived, &runtime_canonical(&order));
        prop_assert_eq!(order.fingerprint(), idem::RequestHash::of_bytes(derived.as_bytes()));
    }

    #[test]
    fn environment_and_skipped_fields_never_matter(order in order(), ip in text(), hint in any::<u8>()) {
        let mut other = order.clone();
        other.client_ip = ip;
        other.cache_hint = hint;
        prop_assert_eq!(order.fingerprint(), other.fingerprint());
    }

    #[test]
    fn decimal_scale_never_matters(order in order(), extra_scale in 0u32..10) {
        let mut other = order.clone();
        let mut amount = other.amount;
        amount.rescale(amount.scale() + extra_scale);
        prop_assume!(amount == order.amount); // rescale saturates at 28 digits
        other.amount = amount;
        prop_assert_eq!(order.canonical_json(), other.canonical_json());
    }

    #[test]
    fn a_changed_identity_field_changes_the_fingerprint(order in order(), bump in 1u64..) {
        let mut other = order.clone();
        other.order_id = order.order_id.wrapping_add(bump);
        prop_assert_ne!(order.fingerprint(), other.fingerprint());
    }
}
