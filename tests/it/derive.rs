//! Behaviour of `#[derive(Fingerprint)]`: exact canonical texts and fingerprints for every shape
//! and attribute, subsets via `idem::fields!`, and agreement with the run-time canonicalizer.

use std::collections::BTreeMap;

use idem::{
    Fingerprint, RequestHash,
    fingerprint::{Canonical, CanonicalWriter},
    json::ValueSpec,
};
use rust_decimal::{Decimal, dec};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// SHA-256 of `text`, computed independently of idem.
fn sha256(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// The run-time path: `serde_json::to_value` canonicalized under the spec the derive exports.
fn runtime_canonical<T: Fingerprint + Serialize>(v: &T) -> String {
    let ValueSpec::Object(spec) = T::value_spec() else {
        panic!("a struct with named fields exports an object spec");
    };
    let value = serde_json::to_value(v).expect("serializable");
    idem::json::canonicalize(&value, &spec).expect("canonicalizable")
}

/// Asserts the derive's text, its fingerprint, and the run-time path's text.
fn assert_canonical<T: Fingerprint + Serialize>(v: &T, expected: &str) {
    assert_eq!(v.canonical_json(), expected);
    assert_eq!(v.fingerprint().as_bytes(), &sha256(expected));
    assert_eq!(runtime_canonical(v), expected, "run-time path");
}

#[derive(Fingerprint, Serialize)]
struct Pay {
    amount: Decimal,
    currency: String,
    #[fingerprint(env)]
    client_ip: String,
    note: Option<String>,
}

fn pay() -> Pay {
    Pay {
        amount: dec!(100.00),
        currency: "EUR".into(),
        client_ip: "1.2.3.4".into(),
        note: None,
    }
}

#[test]
fn the_payment_example() {
    let p = pay();
    assert_eq!(p.canonical_json(), r#"{"amount":100,"currency":"EUR"}"#);
    assert_eq!(
        p.fingerprint().as_bytes(),
        &sha256(r#"{"amount":100,"currency":"EUR"}"#)
    );
    assert_eq!(
        p.fingerprint().to_string(),
        Sha256::digest(br#"{"amount":100,"currency":"EUR"}"#)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(runtime_canonical(&p), p.canonical_json());
}

#[test]
fn env_fields_and_null_members_never_change_the_fingerprint() {
    let a = pay();
    let b = Pay {
        client_ip: "203.0.113.9".into(),
        amount: dec!(100),
        ..pay()
    };
    assert_eq!(a.fingerprint(), b.fingerprint());
    let with_note = Pay {
        note: Some("gift".into()),
        ..pay()
    };
    assert_canonical(
        &with_note,
        r#"{"amount":100,"currency":"EUR","note":"gift"}"#,
    );
    assert_ne!(a.fingerprint(), with_note.fingerprint());
}

#[test]
fn value_spec_whitelists_hashed_fields_and_lists_env_fields() {
    let ValueSpec::Object(spec) = Pay::value_spec() else {
        panic!("object spec");
    };
    let fields: Vec<_> = spec.fields().map(|(name, _)| name).collect();
    assert_eq!(fields, ["amount", "currency", "note"]);
    assert_eq!(spec.env_fields().collect::<Vec<_>>(), ["client_ip"]);
}

#[derive(Fingerprint, Serialize)]
#[serde(rename_all = "camelCase")]
struct Renamed {
    #[serde(rename = "a")]
    z: u8,
    b_field: u8,
    #[serde(rename(serialize = "A_upper"))]
    m: u8,
    customer_id: String,
    #[serde(rename = "é")]
    accent: u8,
    #[serde(rename = "quote\"back\\slash\ttab")]
    odd: u8,
}

#[test]
fn members_sort_by_the_bytes_of_their_wire_names() {
    let v = Renamed {
        z: 1,
        b_field: 2,
        m: 3,
        customer_id: "c".into(),
        accent: 4,
        odd: 5,
    };
    // Uppercase sorts before lowercase, `é` (0xC3..) after ASCII; names are escaped.
    let expected =
        r#"{"A_upper":3,"a":1,"bField":2,"customerId":"c","quote\"back\\slash\ttab":5,"é":4}"#;
    assert_eq!(v.canonical_json(), expected);
    assert_eq!(v.fingerprint().as_bytes(), &sha256(expected));
    // The run-time path reads a client's body as serde deserializes it: `m` is read under its
    // deserialize-side name and written under the serialize-side one; `A_upper` is not a name
    // serde reads, so a body carrying it is not the same request.
    let ValueSpec::Object(spec) = Renamed::value_spec() else {
        panic!("object spec");
    };
    let body = serde_json::json!({
        "a": 1, "bField": 2, "m": 3, "customerId": "c", "é": 4, "quote\"back\\slash\ttab": 5,
    });
    assert_eq!(
        idem::json::canonicalize(&body, &spec).unwrap(),
        expected,
        "run-time path"
    );
    let serialized = serde_json::to_value(&v).unwrap();
    assert_ne!(
        idem::json::canonicalize(&serialized, &spec).unwrap(),
        expected,
        "a member serde does not read is not hashed"
    );
}

#[derive(Fingerprint, Serialize, Clone)]
struct Line {
    sku: String,
    qty: u32,
    price: Decimal,
}

#[derive(Fingerprint, Serialize, Clone)]
#[serde(rename_all = "snake_case")]
enum Method {
    Card,
    Wallet(String),
    Split(u8, Decimal),
    BankTransfer {
        iban: String,
        reference: Option<String>,
        #[fingerprint(env)]
        signature: String,
    },
    #[serde(rename = "cash")]
    Cash(Option<u8>),
}

#[derive(Fingerprint, Serialize, Clone)]
struct Order {
    lines: Vec<Line>,
    method: Method,
    methods: Vec<Method>,
    shipping: Option<Line>,
}

#[test]
fn nested_structs_and_every_kind_of_variant() {
    let line = Line {
        sku: "A-1".into(),
        qty: 2,
        price: dec!(9.90),
    };
    let order = Order {
        lines: vec![line.clone()],
        method: Method::BankTransfer {
            iban: "DE00".into(),
            reference: None,
            signature: "sig".into(),
        },
        methods: vec![
            Method::Card,
            Method::Wallet("w".into()),
            Method::Split(1, dec!(2.50)),
            Method::Cash(None),
        ],
        shipping: None,
    };
    assert_canonical(
        &order,
        concat!(
            r#"{"lines":[{"price":9.9,"qty":2,"sku":"A-1"}],"#,
            r#""method":{"bank_transfer":{"iban":"DE00"}},"#,
            r#""methods":["card",{"wallet":"w"},{"split":[1,2.5]},{"cash":null}]}"#
        ),
    );
    assert_eq!(Method::Card.canonical_json(), r#""card""#);
    assert_eq!(Method::Cash(Some(3)).canonical_json(), r#"{"cash":3}"#);
    // The signature of a variant is an environment field too.
    let a = Method::BankTransfer {
        iban: "X".into(),
        reference: Some("r".into()),
        signature: "1".into(),
    };
    let b = Method::BankTransfer {
        iban: "X".into(),
        reference: Some("r".into()),
        signature: "2".into(),
    };
    assert_eq!(
        a.canonical_json(),
        r#"{"bank_transfer":{"iban":"X","reference":"r"}}"#
    );
    assert_eq!(a.fingerprint(), b.fingerprint());
}

#[test]
fn enum_spec_describes_every_variant() {
    let ValueSpec::Enum(variants) = Method::value_spec() else {
        panic!("enum spec");
    };
    let names: Vec<_> = variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["card", "wallet", "split", "bank_transfer", "cash"]);
    assert_eq!(variants[0].payload, None);
    assert_eq!(variants[1].payload, Some(ValueSpec::Any));
    assert_eq!(
        variants[2].payload,
        Some(ValueSpec::Tuple(vec![ValueSpec::Any, ValueSpec::Decimal]))
    );
    assert!(matches!(variants[3].payload, Some(ValueSpec::Object(_))));
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

#[derive(Fingerprint, Serialize)]
struct Sparse {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
    #[serde(skip_serializing_if = "is_zero")]
    retries: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    id: u8,
}

#[test]
fn skip_serializing_if_is_honoured() {
    let empty = Sparse {
        tags: vec![],
        retries: 0,
        note: None,
        id: 1,
    };
    assert_canonical(&empty, r#"{"id":1}"#);
    let full = Sparse {
        tags: vec!["t".into()],
        retries: 2,
        note: Some("n".into()),
        id: 1,
    };
    assert_canonical(&full, r#"{"id":1,"note":"n","retries":2,"tags":["t"]}"#);
}

// Skipped fields are read by neither derive.
#[allow(dead_code)]
#[derive(Fingerprint, Serialize)]
struct Skips {
    id: u8,
    #[serde(skip)]
    cache: u8,
    #[serde(skip_serializing)]
    internal: u8,
    #[fingerprint(skip)]
    debug_note: String,
    #[fingerprint(include)]
    #[serde(rename = "nonce")]
    order_nonce: u64,
}

#[test]
fn skipped_fields_are_not_hashed_and_include_forces_an_env_looking_name() {
    let v = Skips {
        id: 1,
        cache: 2,
        internal: 3,
        debug_note: "x".into(),
        order_nonce: 7,
    };
    assert_canonical(&v, r#"{"id":1,"nonce":7}"#);
}

fn write_cents(v: &u64, w: &mut CanonicalWriter<'_>) {
    w.decimal(i128::from(*v), 2);
}

// Skipped fields are read by neither derive.
#[allow(dead_code)]
#[derive(Fingerprint, Serialize)]
struct Attributes {
    #[fingerprint(float)]
    ratio: f64,
    #[fingerprint(float)]
    weights: Option<Vec<f32>>,
    #[fingerprint(float)]
    missing: Option<f64>,
    #[fingerprint(base64)]
    payload: Vec<u8>,
    #[fingerprint(base64)]
    digest: Option<[u8; 2]>,
    #[fingerprint(with = write_cents)]
    #[serde(skip)]
    cents: u64,
}

#[test]
fn float_base64_and_with_fields() {
    let v = Attributes {
        ratio: 0.1,
        weights: Some(vec![1.5, 100.0]),
        missing: None,
        payload: b"hi!?".to_vec(),
        digest: Some([0xfb, 0xff]),
        cents: 12345,
    };
    assert_eq!(
        v.canonical_json(),
        r#"{"digest":"+/8=","payload":"aGkhPw==","ratio":0.1,"weights":[1.5,100]}"#
    );
    #[derive(Fingerprint, Serialize)]
    struct Priced {
        #[fingerprint(with = write_cents)]
        cents: u64,
        #[fingerprint(float)]
        nan: f64,
    }
    let p = Priced {
        cents: 12345,
        nan: f64::NAN,
    };
    // A NaN is `null`, so its member is omitted, like serde_json's `null`.
    assert_eq!(p.canonical_json(), r#"{"cents":123.45}"#);
    let ValueSpec::Object(spec) = Attributes::value_spec() else {
        panic!("object spec");
    };
    let specs: BTreeMap<_, _> = spec.fields().collect();
    assert_eq!(specs["payload"], &ValueSpec::Base64);
    assert_eq!(specs["ratio"], &ValueSpec::Any);
}

#[derive(Fingerprint, Serialize)]
struct Amount(Decimal);

// Skipped fields are read by neither derive.
#[allow(dead_code)]
#[derive(Fingerprint, Serialize)]
struct Point(i32, i32, #[serde(skip)] u8);

#[derive(Fingerprint, Serialize)]
struct Marker;

#[derive(Fingerprint, Serialize)]
#[serde(transparent)]
struct CustomerId {
    id: String,
}

#[derive(Fingerprint, Serialize)]
struct Shapes {
    amount: Amount,
    point: Point,
    marker: Marker,
    customer: CustomerId,
}

#[test]
fn newtype_tuple_unit_and_transparent_structs_serialize_like_serde() {
    assert_eq!(Amount(dec!(1.10)).canonical_json(), "1.1");
    assert_eq!(Point(1, -2, 9).canonical_json(), "[1,-2]");
    assert_eq!(Marker.canonical_json(), "null");
    assert!(Marker.is_null());
    assert_eq!(CustomerId { id: "c1".into() }.canonical_json(), r#""c1""#);
    let s = Shapes {
        amount: Amount(dec!(5.00)),
        point: Point(3, 4, 0),
        marker: Marker,
        customer: CustomerId { id: "c".into() },
    };
    // The unit struct is `null`, so its member is omitted.
    assert_canonical(&s, r#"{"amount":5,"customer":"c","point":[3,4]}"#);
}

#[derive(Fingerprint, Serialize)]
struct Generic<'a, T> {
    items: Vec<T>,
    label: &'a str,
}

#[test]
fn generics_and_borrowed_fields() {
    let g = Generic {
        items: vec![dec!(1.0), dec!(2.50)],
        label: "l",
    };
    assert_canonical(&g, r#"{"items":[1,2.5],"label":"l"}"#);
}

#[derive(Fingerprint, Serialize)]
struct WithTuple {
    ids: (u64, String, Option<Decimal>, Option<String>),
}

/// Tuples are arrays (serde's form), nulls kept in place; scalars, strings, sequences and JSON
/// values are fingerprints of their own canonical text, so that `#[idempotent]` can hash a path
/// parameter or a body that is not a struct.
#[test]
fn tuples_and_whole_values() {
    assert_canonical(
        &WithTuple {
            ids: (7, "a\"b".into(), Some(dec!(1.50)), None),
        },
        r#"{"ids":[7,"a\"b",1.5,null]}"#,
    );
    let hash = |text: &str| RequestHash::of_bytes(text.as_bytes());
    assert_eq!((7u64, "x".to_owned()).fingerprint(), hash(r#"[7,"x"]"#));
    assert_eq!("pay_1".to_owned().fingerprint(), hash(r#""pay_1""#));
    assert_eq!(42u32.fingerprint(), hash("42"));
    assert_eq!(vec![dec!(1.0), dec!(0.50)].fingerprint(), hash("[1,0.5]"));
    let body = serde_json::json!({"b": 1.0, "a": null, "c": [true]});
    assert_eq!(body.fingerprint(), hash(r#"{"b":1,"c":[true]}"#));
    assert_eq!(body.canonical_json(), r#"{"b":1,"c":[true]}"#);
}

fn write_or_panic(v: &u64, w: &mut CanonicalWriter<'_>) {
    assert!(*v != 0, "a writer that panics");
    w.integer(*v);
}

/// Generated code writes through a buffer it borrows from the writer: a panic in the middle
/// (here in a `with` function) gives the caller's buffer back as it was, and the per-thread
/// scratch buffer of `fingerprint()` keeps working.
#[test]
fn a_panicking_writer_gives_the_buffer_back() {
    #[derive(Fingerprint)]
    struct Pay {
        amount: u64,
        #[fingerprint(with = write_or_panic)]
        check: u64,
        note: String,
    }
    let bad = Pay {
        amount: 1,
        check: 0,
        note: "n".into(),
    };
    let mut out = b"kept".to_vec();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bad.write_canonical(&mut CanonicalWriter::new(&mut out));
    }));
    assert!(caught.is_err());
    assert_eq!(out, b"kept");
    assert!(std::panic::catch_unwind(|| bad.fingerprint()).is_err());
    let good = Pay { check: 7, ..bad };
    assert_eq!(
        good.fingerprint(),
        RequestHash::of_bytes(br#"{"amount":1,"check":7,"note":"n"}"#)
    );
    let mut out = b"kept".to_vec();
    good.write_canonical(&mut CanonicalWriter::new(&mut out));
    assert_eq!(out, br#"kept{"amount":1,"check":7,"note":"n"}"#);
}

#[derive(Fingerprint)]
enum Never {}

#[test]
fn an_empty_enum_has_an_empty_spec() {
    assert_eq!(Never::value_spec(), ValueSpec::Enum(vec![]));
}

#[derive(Fingerprint, Serialize)]
struct CreatePayment {
    amount: Decimal,
    currency: String,
    description: Option<String>,
    customer: String,
    #[fingerprint(env)]
    client_ip: String,
    #[fingerprint(skip)]
    trace: String,
}

fn create() -> CreatePayment {
    CreatePayment {
        amount: dec!(100.00),
        currency: "EUR".into(),
        description: Some("first".into()),
        customer: "cus_1".into(),
        client_ip: "1.2.3.4".into(),
        trace: "t".into(),
    }
}

#[test]
fn subset_fingerprints_via_fields() {
    let p = create();
    let mask = idem::fields!(CreatePayment: amount, currency);
    let subset = p.fingerprint_fields(mask);
    assert_eq!(
        subset.as_bytes(),
        &sha256(r#"{"amount":100,"currency":"EUR"}"#)
    );
    assert_ne!(subset, p.fingerprint());

    // Order of the list is irrelevant; members are still sorted.
    assert_eq!(
        p.fingerprint_fields(idem::fields!(CreatePayment: currency, amount)),
        subset
    );

    // Fields outside the subset, env and skip fields do not matter.
    let q = CreatePayment {
        description: None,
        customer: "cus_2".into(),
        client_ip: "5.6.7.8".into(),
        trace: "u".into(),
        ..create()
    };
    assert_eq!(q.fingerprint_fields(mask), subset);
    assert_ne!(q.fingerprint(), p.fingerprint());

    // Env and skipped fields are never written, whatever the mask says.
    let mut out = Vec::new();
    p.write_fields(
        &mut CanonicalWriter::new(&mut out),
        idem::fingerprint::FieldMask::ALL,
    );
    assert_eq!(String::from_utf8(out).unwrap(), p.canonical_json());
    assert_eq!(
        p.canonical_json(),
        r#"{"amount":100,"currency":"EUR","customer":"cus_1","description":"first"}"#
    );

    // A `None` member in the subset is omitted like in the full form.
    let none = idem::fields!(CreatePayment: description, customer);
    assert_eq!(
        q.fingerprint_fields(none).as_bytes(),
        &sha256(r#"{"customer":"cus_2"}"#)
    );
}

#[test]
fn fields_masks_are_constants() {
    const MASK: idem::fingerprint::FieldMask = idem::fields!(CreatePayment: customer);
    assert_eq!(MASK, idem::fingerprint::FieldMask(1 << 3));
    assert_eq!(
        create().fingerprint_fields(MASK),
        RequestHash::of_bytes(br#"{"customer":"cus_1"}"#)
    );
}

#[test]
fn types_without_named_fields_ignore_the_mask() {
    let m = Method::Wallet("w".into());
    let mut out = Vec::new();
    m.write_fields(
        &mut CanonicalWriter::new(&mut out),
        idem::fingerprint::FieldMask(0),
    );
    assert_eq!(out, br#"{"wallet":"w"}"#);
}
