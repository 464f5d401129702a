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
    attributes: BTreeMap<String, String>,
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
        proptest::collection::btree_map(text(), text(), 0..4),
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

// ---------------------------------------------------------------- the client's bodies

/// The spec the layer and the actix middleware take from a derived type
/// (`IdempotencyLayer::for_type::<T>()`).
fn spec_of<T: Fingerprint>() -> idem::json::Spec {
    match T::value_spec() {
        ValueSpec::Object(spec) => spec,
        other => panic!("not an object: {other:?}"),
    }
}

/// The differential test: each body, as a client sends it, hashes on the layer's raw path
/// (strictly: unknown members refused) exactly as the handler's deserialized value does on
/// the derive's path — and bodies the handler tells apart hash apart.
fn same_on_both_paths<T>(bodies: &[&str])
where
    T: Fingerprint + serde::de::DeserializeOwned,
{
    let spec = spec_of::<T>();
    let strict = idem::json::Canonicalizer::new().deny_unknown_fields(true);
    for body in bodies {
        let typed: T = serde_json::from_str(body).unwrap_or_else(|e| panic!("{body}: {e}"));
        let raw = strict
            .fingerprint_slice(body.as_bytes(), &spec)
            .unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(
            raw,
            typed.fingerprint(),
            "{body}: raw {:?} vs typed {}",
            idem::json::canonicalize_slice(body.as_bytes(), &spec),
            typed.canonical_json()
        );
    }
}

/// [`same_on_both_paths`] for types without `deny_unknown_fields`, whose bodies may carry
/// members serde ignores.
fn loosely_same<T>(bodies: &[&str])
where
    T: Fingerprint + serde::de::DeserializeOwned,
{
    let spec = spec_of::<T>();
    for body in bodies {
        let typed: T = serde_json::from_str(body).unwrap_or_else(|e| panic!("{body}: {e}"));
        let raw = idem::json::fingerprint_slice(body.as_bytes(), &spec);
        assert_eq!(raw.unwrap(), typed.fingerprint(), "{body}");
    }
}

#[derive(serde::Deserialize, Fingerprint)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // `trace` is read by serde only: a member the fingerprint leaves out.
struct Aliased {
    #[serde(alias = "amt")]
    amount: u64,
    #[serde(rename(deserialize = "cur"))]
    currency: String,
    #[fingerprint(skip)]
    #[serde(default)]
    trace: Option<String>,
}

#[derive(serde::Deserialize, Fingerprint)]
#[serde(rename_all(deserialize = "camelCase"))]
struct CamelIn {
    amount_minor: u64,
    customer_id: String,
}

fn eur() -> String {
    "EUR".to_owned()
}

#[derive(serde::Deserialize, Fingerprint)]
struct Defaults {
    amount: u64,
    #[serde(default = "eur")]
    currency: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    labels: Vec<String>,
    #[serde(skip_deserializing)]
    region: String,
}

/// Written as `qty`, read as `n` only: a member `qty` is unknown to serde, and to the spec.
#[derive(serde::Deserialize, Fingerprint)]
struct ReadElsewhere {
    #[serde(default, rename(deserialize = "n"))]
    qty: u64,
}

#[derive(serde::Deserialize, Fingerprint)]
#[serde(rename_all_fields(deserialize = "camelCase"))]
enum Instruction {
    Pay { amount_minor: u64 },
}

#[derive(serde::Deserialize, Fingerprint)]
struct Instructed {
    instruction: Instruction,
}

#[derive(serde::Deserialize, Fingerprint, Default)]
#[serde(default)]
struct AllDefault {
    amount: u64,
    currency: String,
}

#[test]
fn serde_attributes_read_the_same_on_both_paths() {
    same_on_both_paths::<Aliased>(&[
        r#"{"amount":5,"cur":"EUR"}"#,
        r#"{"amt":5,"cur":"EUR"}"#,
        r#"{"amt":6,"cur":"EUR","trace":"t-1"}"#,
    ]);
    same_on_both_paths::<CamelIn>(&[
        r#"{"amountMinor":5,"customerId":"c1"}"#,
        r#"{"amountMinor":700,"customerId":"c1"}"#,
    ]);
    same_on_both_paths::<Defaults>(&[
        r#"{"amount":1}"#,
        r#"{"amount":1,"currency":"EUR"}"#,
        r#"{"amount":1,"currency":"USD","tags":["a"]}"#,
        r#"{"amount":1,"labels":["x"]}"#,
    ]);
    same_on_both_paths::<AllDefault>(&[r#"{}"#, r#"{"amount":3}"#, r#"{"currency":"EUR"}"#]);
    // `qty` is not read: the handler gets the default, and so does the hash.
    loosely_same::<ReadElsewhere>(&[r#"{"qty":5}"#, r#"{"n":5}"#, r#"{"n":5,"qty":7}"#]);
    // A member serde does not read (`skip_deserializing`) is ignored: the default is hashed.
    loosely_same::<Defaults>(&[r#"{"amount":1,"region":"ignored"}"#]);
    same_on_both_paths::<Instructed>(&[
        r#"{"instruction":{"Pay":{"amountMinor":5}}}"#,
        r#"{"instruction":{"Pay":{"amountMinor":700}}}"#,
    ]);

    // What the handler tells apart, the raw path tells apart: an alias is the member itself.
    let spec = spec_of::<Aliased>();
    let hash = |body: &str| idem::json::fingerprint_slice(body.as_bytes(), &spec).unwrap();
    assert_ne!(
        hash(r#"{"amt":5,"cur":"EUR"}"#),
        hash(r#"{"amt":6,"cur":"EUR"}"#)
    );
    assert_eq!(
        hash(r#"{"amt":5,"cur":"EUR"}"#),
        hash(r#"{"amount":5,"cur":"EUR"}"#)
    );
    // Both names at once: serde refuses the body, and so does the raw path.
    assert!(idem::json::fingerprint_slice(br#"{"amt":5,"amount":5,"cur":"E"}"#, &spec).is_err());
    // A default is the member itself, on both paths.
    let spec = spec_of::<Defaults>();
    let hash = |body: &str| idem::json::fingerprint_slice(body.as_bytes(), &spec).unwrap();
    assert_eq!(
        hash(r#"{"amount":1}"#),
        hash(r#"{"amount":1,"currency":"EUR"}"#)
    );
    assert_ne!(
        hash(r#"{"amount":1}"#),
        hash(r#"{"amount":1,"currency":"USD"}"#)
    );
}

/// A request read through every serde attribute the exported spec follows.
#[derive(serde::Deserialize, Fingerprint)]
#[serde(rename_all(deserialize = "camelCase"))]
#[allow(dead_code)] // `trace` is read by serde only.
struct ClientShaped {
    #[serde(alias = "amt")]
    amount_minor: u64,
    #[serde(default = "eur")]
    currency: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
    #[serde(default, rename(deserialize = "n"))]
    qty: u64,
    #[serde(skip_deserializing)]
    region: String,
    #[fingerprint(skip)]
    #[serde(default)]
    trace: Option<String>,
}

/// A body as clients send it: each member present or not, under any name serde reads, plus
/// members serde ignores.
fn client_body() -> impl Strategy<Value = String> {
    (
        any::<u64>(),
        prop_oneof![Just("amountMinor"), Just("amt")],
        proptest::option::of(text()),
        proptest::option::of(proptest::collection::vec(text(), 0..3)),
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        proptest::option::of(text()),
        proptest::option::of(text()),
    )
        .prop_map(|(amount, name, currency, tags, n, qty, region, trace)| {
            let mut body = serde_json::Map::new();
            body.insert(name.to_owned(), amount.into());
            let mut put = |k: &str, v: Option<serde_json::Value>| {
                if let Some(v) = v {
                    body.insert(k.to_owned(), v);
                }
            };
            put("currency", currency.map(Into::into));
            put("tags", tags.map(Into::into));
            put("n", n.map(Into::into));
            put("qty", qty.map(Into::into));
            put("region", region.map(Into::into));
            put("trace", trace.map(Into::into));
            serde_json::Value::Object(body).to_string()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The differential property: any body a client sends hashes on the layer's raw path as
    /// the handler's deserialized value does.
    #[test]
    fn client_bodies_hash_alike_on_both_paths(body in client_body()) {
        let typed: ClientShaped = serde_json::from_str(&body).unwrap();
        let raw = idem::json::fingerprint_slice(body.as_bytes(), &spec_of::<ClientShaped>());
        prop_assert_eq!(raw.unwrap(), typed.fingerprint(), "{}", body);
    }
}
