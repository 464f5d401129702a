//! Properties of the run-time canonicalizer over random JSON: both entry points agree, the
//! canonical text is a fixed point, member order and whitespace do not matter, and the typed
//! `Canonical` impls write the same bytes.

use idem_runtime::json::{Spec, ValueSpec, canonicalize, canonicalize_slice};
use idem_runtime::{Canonical, CanonicalWriter};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["a", "b", "B", "é", "ts", "_", "a\"b", "中", "😀", ""])
            .prop_map(str::to_owned),
        1 => any::<String>(),
    ]
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        (-1000i64..1000, 0u32..6).prop_map(|(m, s)| {
            // Short decimals, the common case in requests.
            Number::from_f64(m as f64 / 10f64.powi(s as i32)).unwrap()
        }),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::Number),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn body() -> impl Strategy<Value = Value> {
    prop::collection::vec((key(), json()), 0..8)
        .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>()))
}

/// Whitelists a few names as `Any`, declares `ts` an environment field; the rest is dropped.
fn spec() -> Spec {
    Spec::new()
        .field("a", ValueSpec::Any)
        .field("B", ValueSpec::Any)
        .field("é", ValueSpec::Any)
        .field("中", ValueSpec::Any)
        .field("a\"b", ValueSpec::Any)
        .env("ts")
}

/// Serializes `v` with object members in reverse order and some whitespace.
fn reversed(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n");
                }
                reversed(item, out);
            }
            out.push_str(" ]");
        }
        Value::Object(map) => {
            out.push_str("{\t");
            for (i, (k, item)) in map.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(",\r\n");
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(" : ");
                reversed(item, out);
            }
            out.push_str("\n}");
        }
        other => out.push_str(&other.to_string()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn value_and_raw_paths_agree(v in body()) {
        let spec = spec();
        let from_value = canonicalize(&v, &spec).unwrap();
        let bytes = serde_json::to_vec(&v).unwrap();
        prop_assert_eq!(canonicalize_slice(&bytes, &spec).unwrap(), from_value);
    }

    #[test]
    fn canonical_text_is_a_fixed_point(v in body()) {
        let spec = spec();
        let text = canonicalize(&v, &spec).unwrap();
        // Through the raw path only: a canonical float text can be a long digit string
        // (`189055807539679900000...`), which serde_json's default float parser (without its
        // `float_roundtrip` feature) may round to a neighbouring `f64`.
        prop_assert_eq!(canonicalize_slice(text.as_bytes(), &spec).unwrap(), text);
    }

    #[test]
    fn member_order_and_whitespace_do_not_matter(v in body()) {
        let spec = spec();
        let mut shuffled = String::new();
        reversed(&v, &mut shuffled);
        prop_assert_eq!(
            canonicalize_slice(shuffled.as_bytes(), &spec).unwrap(),
            canonicalize(&v, &spec).unwrap()
        );
    }

    #[test]
    fn typed_value_impl_matches_the_runtime(v in body()) {
        // Whitelist every top-level member: then the spec keeps exactly what `Canonical` writes.
        let spec = v.as_object().unwrap().keys().fold(Spec::new(), |s, k| s.field(k, ValueSpec::Any));
        let mut typed = Vec::new();
        v.write_canonical(&mut CanonicalWriter::new(&mut typed));
        prop_assert_eq!(String::from_utf8(typed).unwrap(), canonicalize(&v, &spec).unwrap());
    }

    #[test]
    fn floats_written_by_the_writer_match_serde_json(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
        // The writer formats with ryu, serde_json with its own shortest-round-trip formatter.
        let mut typed = b"{\"v\":".to_vec();
        CanonicalWriter::new(&mut typed).f64(x);
        typed.push(b'}');
        let spec = Spec::new().field("v", ValueSpec::Any);
        let v = serde_json::json!({ "v": x });
        prop_assert_eq!(canonicalize(&v, &spec).unwrap().into_bytes(), typed.clone());
        let bytes = serde_json::to_vec(&v).unwrap();
        prop_assert_eq!(canonicalize_slice(&bytes, &spec).unwrap().into_bytes(), typed);
    }
}

#[cfg(feature = "decimal")]
proptest! {
    #[test]
    fn decimals_match_their_serde_strings(m in any::<i64>(), scale in 0u32..=28) {
        let d = rust_decimal::Decimal::new(m, scale);
        let mut typed = b"{\"v\":".to_vec();
        d.write_canonical(&mut CanonicalWriter::new(&mut typed));
        typed.push(b'}');
        let spec = Spec::new().field("v", ValueSpec::Decimal);
        let body = format!(r#"{{"v":"{d}"}}"#);
        prop_assert_eq!(canonicalize_slice(body.as_bytes(), &spec).unwrap().into_bytes(), typed);
    }
}
