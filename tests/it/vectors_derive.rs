//! The fingerprint test vectors against the compile-time path: for each vector that a Rust type
//! can express, the input is deserialized into a `#[derive(Fingerprint)]` type and its
//! `canonical_json()` / `fingerprint()` must equal the vector's `canonical` / `sha256`.
//! (`tests/it/vectors.rs` checks the same vectors against the run-time paths.)
#![cfg(all(feature = "decimal", feature = "chrono", feature = "uuid"))]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use idem::Fingerprint;
use rust_decimal::Decimal;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

const VECTORS: &str = include_str!("../vectors/fingerprint.json");

fn case(name: &str) -> Value {
    let all: Value = serde_json::from_str(VECTORS).expect("fingerprint.json is JSON");
    all["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no vector named `{name}`"))
        .clone()
}

/// Deserializes the vector's input into `T` and checks both the text and the hash.
fn check<T: DeserializeOwned + Fingerprint>(name: &str) {
    let case = case(name);
    let input = case["input"].as_str().expect("input");
    let typed: T = serde_json::from_str(input).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        typed.canonical_json(),
        case["canonical"].as_str().unwrap(),
        "{name}: canonical text"
    );
    assert_eq!(
        typed.fingerprint().to_string(),
        case["sha256"].as_str().unwrap(),
        "{name}: sha256"
    );
}

/// A decimal that deserializes from a number or a decimal string; fingerprints as its `Decimal`
/// (a newtype struct is transparent, as in serde).
#[derive(Debug, Deserialize, Fingerprint, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct AnyDecimal(#[serde(deserialize_with = "idem::deserialize::decimal")] Decimal);

#[test]
fn payment_example() {
    #[derive(Deserialize, Fingerprint)]
    #[allow(dead_code)] // env fields are read by serde only
    struct Pay {
        amount: Decimal,
        currency: String,
        #[fingerprint(env)]
        client_ip: String,
        note: Option<String>,
    }
    check::<Pay>("payment_example");
}

#[test]
fn member_order_is_utf8_byte_order() {
    #[derive(Deserialize, Fingerprint)]
    #[allow(non_snake_case)]
    struct Upper {
        b: u8,
        B: u8,
        a: u8,
        A: u8,
        #[serde(rename = "_")]
        underscore: u8,
        Z: u8,
    }
    check::<Upper>("key_order_uppercase_before_lowercase");

    #[derive(Deserialize, Fingerprint)]
    struct NonAscii {
        #[serde(rename = "😀")]
        emoji: u8,
        #[serde(rename = "中")]
        cjk: u8,
        #[serde(rename = "é")]
        e_acute: u8,
        z: u8,
        #[serde(rename = "ÿ")]
        y_diaeresis: u8,
        #[serde(rename = "\u{ff61}")]
        halfwidth_stop: u8,
    }
    check::<NonAscii>("key_order_non_ascii_bytes");

    #[derive(Deserialize, Fingerprint)]
    struct Escaped {
        a: u8,
        #[serde(rename = "a\"b")]
        quoted: u8,
        #[serde(rename = "line\nbreak")]
        newline: u8,
    }
    check::<Escaped>("escaped_member_name");
}

#[test]
fn scalars() {
    #[derive(Deserialize, Fingerprint)]
    struct Booleans {
        t: bool,
        f: bool,
    }
    check::<Booleans>("booleans");

    #[derive(Deserialize, Fingerprint)]
    struct Text {
        v: String,
    }
    check::<Text>("string_short_escapes");
    check::<Text>("string_control_escapes_lowercase");

    #[derive(Deserialize, Fingerprint)]
    struct Unicode {
        nfc: String,
        nfd: String,
        emoji: String,
        cjk: String,
    }
    check::<Unicode>("string_unicode_untouched");

    #[derive(Deserialize, Fingerprint)]
    struct Limits {
        u: u64,
        i: i64,
        z: u8,
    }
    check::<Limits>("number_integer_limits");
}

#[test]
fn decimals() {
    #[derive(Deserialize, Fingerprint)]
    struct Amount {
        amount: Decimal,
    }
    check::<Amount>("decimal_string_100");

    #[derive(Deserialize, Fingerprint)]
    struct Spellings {
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        a: Decimal,
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        b: Decimal,
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        c: Decimal,
    }
    check::<Spellings>("decimal_number_and_string_agree");

    #[derive(Deserialize, Fingerprint)]
    struct NegativeZero {
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        a: Decimal,
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        b: Decimal,
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        c: Decimal,
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        d: Decimal,
    }
    check::<NegativeZero>("number_negative_zero");
}

#[test]
fn null_is_absent() {
    #[derive(Deserialize, Fingerprint)]
    struct Optional {
        a: Option<String>,
        b: Option<u8>,
        c: Option<Decimal>,
    }
    check::<Optional>("null_top_level_omitted");
    check::<Optional>("absent_equals_null");

    #[derive(Deserialize, Fingerprint)]
    struct InArrays {
        a: Vec<Option<u8>>,
        d: Vec<Option<Decimal>>,
        n: Vec<Option<u8>>,
    }
    check::<InArrays>("null_in_arrays_kept");

    // `null_in_map_omitted` is the run-time path's rule only: the derive refuses a map whose
    // values are `Option` (`{"k": null}` and `{}` would be one request; tests/ui).
}

#[test]
fn bytes_sets_and_maps() {
    #[derive(Deserialize, Fingerprint)]
    struct Bytes {
        #[fingerprint(base64)]
        b: Vec<u8>,
        #[fingerprint(base64)]
        c: [u8; 4],
    }
    check::<Bytes>("base64_byte_array");

    #[derive(Deserialize, Fingerprint)]
    struct Tags {
        tags: HashSet<String>,
    }
    check::<Tags>("set_strings_sorted_deduplicated");

    #[derive(Deserialize, Fingerprint)]
    struct Numbers {
        s: BTreeSet<AnyDecimal>,
    }
    check::<Numbers>("set_sorted_by_text_not_value");

    #[derive(Deserialize, Fingerprint)]
    struct DecimalMap {
        m: HashMap<String, AnyDecimal>,
    }
    check::<DecimalMap>("map_decimal_values");

    #[derive(Deserialize, Fingerprint)]
    struct Q {
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        q: Decimal,
    }
    #[derive(Deserialize, Fingerprint)]
    struct ObjectMap {
        m: BTreeMap<String, Q>,
    }
    check::<ObjectMap>("map_of_objects");
}

#[test]
fn nesting_whitelists_and_environment_fields() {
    #[derive(Deserialize, Fingerprint)]
    #[allow(dead_code)] // env fields are read by serde only
    struct Line {
        sku: String,
        price: Option<Decimal>,
        #[fingerprint(env)]
        trace_id: Option<String>,
    }
    #[derive(Deserialize, Fingerprint)]
    struct Order {
        lines: Vec<Line>,
        total: Decimal,
    }
    check::<Order>("nested_object_whitelist");

    #[derive(Deserialize, Fingerprint)]
    struct C {
        d: Decimal,
        #[fingerprint(skip)]
        #[allow(dead_code)]
        e: String,
    }
    #[derive(Deserialize, Fingerprint)]
    struct B {
        c: C,
    }
    #[derive(Deserialize, Fingerprint)]
    struct A {
        b: B,
    }
    #[derive(Deserialize, Fingerprint)]
    struct Top {
        a: A,
    }
    check::<Top>("nested_objects_three_levels");

    #[derive(Deserialize, Fingerprint)]
    #[allow(dead_code)]
    struct Env {
        #[fingerprint(env)]
        client_ip: String,
        #[fingerprint(env)]
        ip: String,
        #[fingerprint(env)]
        ip_address: String,
        #[fingerprint(env)]
        remote_addr: String,
        #[fingerprint(env)]
        remote_ip: String,
        #[fingerprint(env)]
        user_agent: String,
        #[fingerprint(env)]
        timestamp: String,
        #[fingerprint(env)]
        ts: String,
        #[fingerprint(env)]
        sent_at: String,
        #[fingerprint(env)]
        request_time: String,
        #[fingerprint(env)]
        nonce: String,
        #[fingerprint(env)]
        signature: String,
        #[fingerprint(env)]
        sig: String,
        #[fingerprint(env)]
        hmac: String,
        #[fingerprint(env)]
        request_id: String,
        #[fingerprint(env)]
        trace_id: String,
        #[fingerprint(env)]
        span_id: String,
        #[fingerprint(env)]
        x_forwarded_for: String,
        #[fingerprint(env)]
        forwarded_for: String,
        amount: AnyDecimal,
    }
    check::<Env>("env_fields_dropped");
}

#[derive(Deserialize, Fingerprint)]
enum Method {
    Cash,
    Card { last4: String },
}

#[test]
fn enums() {
    #[derive(Deserialize, Fingerprint)]
    struct Unit {
        m: Method,
    }
    check::<Unit>("enum_unit_string");

    #[derive(Deserialize, Fingerprint)]
    #[allow(dead_code)]
    enum CardOnly {
        Cash,
        Card {
            last4: String,
            #[fingerprint(skip)]
            cvc: String,
        },
    }
    #[derive(Deserialize, Fingerprint)]
    struct Struct {
        m: CardOnly,
    }
    check::<Struct>("enum_struct_variant");

    #[derive(Deserialize, Fingerprint)]
    enum Amount {
        Amount(Option<Decimal>),
    }
    #[derive(Deserialize, Fingerprint)]
    struct Newtype {
        m: Amount,
        n: Amount,
    }
    check::<Newtype>("enum_newtype_decimal");
}

#[test]
fn timestamps_dates_and_uuids() {
    #[derive(Deserialize, Fingerprint)]
    struct Times {
        t: chrono::DateTime<chrono::Utc>,
        u: chrono::DateTime<chrono::Utc>,
    }
    check::<Times>("timestamp_fraction_trimmed");

    #[derive(Deserialize, Fingerprint)]
    struct Offset {
        t: chrono::DateTime<chrono::FixedOffset>,
    }
    check::<Offset>("timestamp_negative_offset");

    #[derive(Deserialize, Fingerprint)]
    struct Day {
        d: chrono::NaiveDate,
    }
    check::<Day>("date_kept");

    #[derive(Deserialize, Fingerprint)]
    struct Ids {
        a: uuid::Uuid,
        b: uuid::Uuid,
        c: uuid::Uuid,
        d: uuid::Uuid,
    }
    check::<Ids>("uuid_forms_lowercased");
}

#[test]
fn the_documented_spec_example() {
    #[derive(Deserialize, Fingerprint)]
    #[allow(dead_code)] // env fields are read by serde only
    struct Line {
        sku: String,
        #[serde(deserialize_with = "idem::deserialize::decimal")]
        qty: Decimal,
        #[fingerprint(env)]
        trace_id: String,
    }
    #[derive(Deserialize, Fingerprint)]
    #[allow(dead_code)]
    struct Order {
        #[fingerprint(env)]
        timestamp: String,
        currency: String,
        amount: Decimal,
        #[fingerprint(env)]
        client_ip: String,
        lines: Vec<Line>,
        tags: BTreeSet<String>,
        method: Method,
        note: Option<String>,
        #[fingerprint(skip)]
        debug: bool,
    }
    check::<Order>("spec_format_example");
}
