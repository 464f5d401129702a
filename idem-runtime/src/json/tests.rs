//! Every spec kind and error, through both entry points.

use serde_json::json;

use super::*;

/// Canonicalizes `json` through the raw path and, when serde_json can hold it, the `Value` path;
/// both must agree.
fn both(json: &str, spec: &Spec) -> Result<String, CanonicalError> {
    let raw = canonicalize_slice(json.as_bytes(), spec);
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(json) {
        assert_eq!(
            canonicalize(&value, spec),
            raw,
            "value vs raw path for {json}"
        );
    }
    raw
}

fn ok(json: &str, spec: &Spec) -> String {
    both(json, spec).unwrap_or_else(|e| panic!("{json}: {e}"))
}

fn err(json: &str, spec: &Spec) -> CanonicalError {
    both(json, spec).expect_err(json)
}

fn one(kind: ValueSpec) -> Spec {
    Spec::new().field("v", kind)
}

#[test]
fn whitelist_env_and_unknown_members() {
    let spec = Spec::new()
        .field("b", ValueSpec::Any)
        .field("a", ValueSpec::Any)
        .env("ip");
    assert_eq!(
        ok(r#"{"ip":"1","b":2,"x":3,"a":1}"#, &spec),
        r#"{"a":1,"b":2}"#
    );
    assert_eq!(ok(r#"{"a":null,"b":null}"#, &spec), "{}");
    assert_eq!(ok("{}", &spec), "{}");
    let strict = Canonicalizer::new().deny_unknown_fields(true);
    assert!(
        strict
            .canonicalize_slice(br#"{"ip":"1","a":1}"#, &spec)
            .is_ok()
    );
    let e = strict
        .canonicalize_slice(br#"{"a":{"x":1},"c":1}"#, &spec)
        .unwrap_err();
    assert_eq!((e.kind(), e.path()), ("unknown_field", Some("$")));
    // `Any` keeps every member, even under deny_unknown_fields.
    assert!(
        strict
            .canonicalize_slice(br#"{"a":{"x":1}}"#, &spec)
            .is_ok()
    );
    // env wins over a whitelisting of the same name.
    let both_ways = Spec::new().field("ip", ValueSpec::Any).env("ip");
    assert_eq!(ok(r#"{"ip":"1"}"#, &both_ways), "{}");
}

#[test]
fn top_level_must_be_an_object() {
    for bad in ["[]", "1", r#""x""#, "null", "true"] {
        let e = err(bad, &Spec::new());
        assert_eq!(
            (e.kind(), e.path()),
            ("unexpected_type", Some("$")),
            "{bad}"
        );
    }
}

#[test]
fn any_sorts_by_bytes_and_omits_null_members() {
    let spec = one(ValueSpec::Any);
    assert_eq!(
        ok(
            r#"{"v":{"b":1,"a":[null,{"z":null}],"B":true,"é":"\u00e9","e":false}}"#,
            &spec
        ),
        r#"{"v":{"B":true,"a":[null,{}],"b":1,"e":false,"é":"é"}}"#
    );
    assert_eq!(
        ok(r#"{"v":"\"\\\/\b\f\n\r\t\u0001\u001f\u007f\u2028"}"#, &spec),
        "{\"v\":\"\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}\u{2028}\"}"
    );
}

#[test]
fn numbers_are_exact_decimals() {
    let spec = one(ValueSpec::Any);
    for (input, want) in [
        ("100", "100"),
        ("100.0", "100"),
        ("100.00", "100"),
        ("1e2", "100"),
        ("1E+2", "100"),
        ("0.10", "0.1"),
        ("-0", "0"),
        ("-0.0e-5", "0"),
        ("1.5e-7", "0.00000015"),
        ("-123.450", "-123.45"),
        ("18446744073709551615", "18446744073709551615"),
        ("-9223372036854775808", "-9223372036854775808"),
        (
            "1.7976931348623157e308",
            &format!("17976931348623157{}", "0".repeat(292)),
        ),
    ] {
        assert_eq!(
            ok(&format!(r#"{{"v":{input}}}"#), &spec),
            format!(r#"{{"v":{want}}}"#)
        );
    }
    // Beyond f64/u64: exact on the raw path only.
    let big = r#"{"v":123456789012345678901234567890.1230}"#;
    assert_eq!(
        canonicalize_slice(big.as_bytes(), &spec).unwrap(),
        r#"{"v":123456789012345678901234567890.123}"#
    );
    let e = canonicalize_slice(br#"{"v":[1e1101]}"#, &spec).unwrap_err();
    assert_eq!(
        (e.kind(), e.path()),
        ("number_out_of_range", Some("$.v[0]"))
    );
    assert!(canonicalize_slice(br#"{"v":1e1100}"#, &spec).is_ok());
    // A string stays a string under `Any`.
    assert_eq!(ok(r#"{"v":"1.0"}"#, &spec), r#"{"v":"1.0"}"#);
}

/// The `Value` path writes an `f64` by its shortest text, even one that holds the number exactly
/// (`docs/fingerprint.md`; the accept/refuse and byte differences the `canonical_differential`
/// fuzz target allows are those of numbers like these and of duplicate member names).
#[test]
fn value_path_writes_floats_by_their_shortest_text() {
    let spec = one(ValueSpec::Any);
    for (input, raw, by_value) in [
        (
            "18446744073709551616",
            "18446744073709551616",
            "18446744073709552000",
        ),
        (
            "0.1000000000000000055511151231257827021181583404541015625",
            "0.1000000000000000055511151231257827021181583404541015625",
            "0.1",
        ),
    ] {
        let body = format!(r#"{{"v":{input}}}"#);
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            canonicalize_slice(body.as_bytes(), &spec).unwrap(),
            format!(r#"{{"v":{raw}}}"#)
        );
        assert_eq!(
            canonicalize(&value, &spec).unwrap(),
            format!(r#"{{"v":{by_value}}}"#)
        );
    }
    // A duplicate member name: the raw path refuses the body, a `Value` keeps the last one.
    let body = r#"{"v":[[1]],"v":2}"#;
    let value: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(canonicalize(&value, &spec).unwrap(), r#"{"v":2}"#);
    let strict = Canonicalizer::new().max_depth(2);
    let e = strict
        .canonicalize_slice(body.as_bytes(), &spec)
        .unwrap_err();
    assert_eq!((e.kind(), e.path()), ("too_deep", Some("$.v[0]")));
    assert_eq!(strict.canonicalize(&value, &spec).unwrap(), r#"{"v":2}"#);
}

/// Found by the `canonical_slice` fuzz target (`docs/reliability.md`): an exponent beyond
/// `i64` saturated to `i64::MIN` once the fraction's digits were subtracted, and negating it
/// overflowed (a panic; without overflow checks, a request for 2^63 zeros, which aborts the
/// process). Such a number is out of range like any other too small to write out.
#[test]
fn exponent_beyond_i64_is_out_of_range() {
    let spec = Spec::new().field("", ValueSpec::Any);
    let e = canonicalize_slice(br#"{"":[0.5e-12312711517028340452]}"#, &spec).unwrap_err();
    assert_eq!(
        (e.kind(), e.path()),
        ("number_out_of_range", Some("$[\"\"][0]"))
    );
    for text in [
        "1.2e-9223372036854775808",
        "1.23e-99999999999999999999",
        "0.50e-99999999999999999999",
    ] {
        let e = err(&format!(r#"{{"v":"{text}"}}"#), &one(ValueSpec::Decimal));
        assert_eq!(
            (e.kind(), e.path()),
            ("number_out_of_range", Some("$.v")),
            "{text}"
        );
        let e = canonicalize_slice(
            format!(r#"{{"v":{text}}}"#).as_bytes(),
            &one(ValueSpec::Any),
        );
        assert_eq!(e.unwrap_err().kind(), "number_out_of_range", "{text}");
    }
    let mut out = Vec::new();
    let e = crate::encode::CanonicalWriter::new(&mut out).number_text("1.5e-99999999999999999999");
    assert_eq!(e.unwrap_err().kind(), "number_out_of_range");
}

#[test]
fn decimal_accepts_numbers_and_decimal_strings() {
    let spec = one(ValueSpec::Decimal);
    for input in [
        "100",
        "100.00",
        "1e2",
        r#""100.00""#,
        r#""1E2""#,
        r#""+100""#,
        r#""100.""#,
    ] {
        assert_eq!(
            ok(&format!(r#"{{"v":{input}}}"#), &spec),
            r#"{"v":100}"#,
            "{input}"
        );
    }
    assert_eq!(ok(r#"{"v":".5"}"#, &spec), r#"{"v":0.5}"#);
    assert_eq!(ok(r#"{"v":"-0.00"}"#, &spec), r#"{"v":0}"#);
    assert_eq!(ok(r#"{"v":null}"#, &spec), "{}");
    for bad in [
        r#""""#,
        r#""1,5""#,
        r#"" 1""#,
        r#""0x10""#,
        r#""NaN""#,
        r#""1_000""#,
    ] {
        let e = err(&format!(r#"{{"v":{bad}}}"#), &spec);
        assert_eq!(
            (e.kind(), e.path()),
            ("invalid_number", Some("$.v")),
            "{bad}"
        );
    }
    let e = err(r#"{"v":true}"#, &spec);
    assert_eq!(e.kind(), "unexpected_type");
    assert_eq!(
        e.to_string(),
        "at `$.v`: expected a number or a decimal string like `\"100.00\"`, found a boolean"
    );
    let e = err(r#"{"v":"1e99999"}"#, &spec);
    assert_eq!(e.kind(), "number_out_of_range");
}

#[test]
fn base64_from_strings_and_byte_arrays() {
    let spec = one(ValueSpec::Base64);
    for input in [
        r#""aGkhPw==""#,
        r#""aGkhPw""#,
        "[104,105,33,63]",
        "[104,105,33,6.3e1]",
    ] {
        assert_eq!(
            ok(&format!(r#"{{"v":{input}}}"#), &spec),
            r#"{"v":"aGkhPw=="}"#,
            "{input}"
        );
    }
    assert_eq!(ok(r#"{"v":""}"#, &spec), r#"{"v":""}"#);
    assert_eq!(ok(r#"{"v":[]}"#, &spec), r#"{"v":""}"#);
    for (bad, path) in [
        (r#""aGkhPw=""#, "$.v"),
        (r#""aGk hPw==""#, "$.v"),
        (r#""-_8=""#, "$.v"),
        (r#""aGkhPx==""#, "$.v"),
        ("[1,256]", "$.v[1]"),
        ("[-1]", "$.v[0]"),
        ("[1.5]", "$.v[0]"),
        (r#"["1"]"#, "$.v[0]"),
        ("[null]", "$.v[0]"),
    ] {
        let e = err(&format!(r#"{{"v":{bad}}}"#), &spec);
        assert_eq!(
            (e.kind(), e.path()),
            ("invalid_base64", Some(path)),
            "{bad}"
        );
    }
    assert_eq!(err(r#"{"v":{}}"#, &spec).kind(), "unexpected_type");
}

#[test]
fn timestamps_dates_and_uuids() {
    let ts = one(ValueSpec::Timestamp);
    assert_eq!(
        ok(r#"{"v":"2024-01-02T03:04:05.120+01:00"}"#, &ts),
        r#"{"v":"2024-01-02T02:04:05.12Z"}"#
    );
    let e = err(r#"{"v":"2024-01-02"}"#, &ts);
    assert_eq!((e.kind(), e.path()), ("invalid_timestamp", Some("$.v")));
    assert_eq!(err(r#"{"v":1704164645}"#, &ts).kind(), "unexpected_type");

    let date = one(ValueSpec::Date);
    assert_eq!(ok(r#"{"v":"2024-02-29"}"#, &date), r#"{"v":"2024-02-29"}"#);
    assert_eq!(err(r#"{"v":"2023-02-29"}"#, &date).kind(), "invalid_date");

    let uuid = one(ValueSpec::Uuid);
    assert_eq!(
        ok(r#"{"v":"67E55044-10B1-426F-9247-BB680E5FE0C8"}"#, &uuid),
        r#"{"v":"67e55044-10b1-426f-9247-bb680e5fe0c8"}"#
    );
    assert_eq!(err(r#"{"v":"67e55044"}"#, &uuid).kind(), "invalid_uuid");
}

#[test]
fn arrays_sets_and_maps() {
    let arr = one(ValueSpec::array(ValueSpec::Decimal));
    assert_eq!(
        ok(r#"{"v":["2.50",1,null]}"#, &arr),
        r#"{"v":[2.5,1,null]}"#
    );
    assert_eq!(err(r#"{"v":{"0":1}}"#, &arr).kind(), "unexpected_type");
    let e = err(r#"{"v":[1,"x"]}"#, &arr);
    assert_eq!(e.path(), Some("$.v[1]"));

    let tuple = one(ValueSpec::Tuple(vec![ValueSpec::Decimal, ValueSpec::Any]));
    assert_eq!(ok(r#"{"v":["1.0","1.0"]}"#, &tuple), r#"{"v":[1,"1.0"]}"#);
    let e = err(r#"{"v":["1.0"]}"#, &tuple);
    assert_eq!((e.kind(), e.path()), ("tuple_length", Some("$.v")));
    assert_eq!(err(r#"{"v":"1"}"#, &tuple).kind(), "unexpected_type");

    let set = one(ValueSpec::set(ValueSpec::Decimal));
    assert_eq!(
        ok(r#"{"v":[10,9,"9.0",null,-1]}"#, &set),
        r#"{"v":[-1,10,9,null]}"#,
        "sorted by canonical text bytes, duplicates removed"
    );
    let set = one(ValueSpec::set(ValueSpec::Any));
    assert_eq!(
        ok(r#"{"v":[{"b":1,"a":2},{"a":2,"b":1},"x",[1]]}"#, &set),
        r#"{"v":["x",[1],{"a":2,"b":1}]}"#
    );

    let map = one(ValueSpec::map(ValueSpec::Decimal));
    assert_eq!(
        ok(r#"{"v":{"b":"1.0","a":null,"A":2}}"#, &map),
        r#"{"v":{"A":2,"b":1}}"#
    );
    assert_eq!(err(r#"{"v":[]}"#, &map).kind(), "unexpected_type");
    let e = err(r#"{"v":{"k":"x"}}"#, &map);
    assert_eq!(e.path(), Some("$.v.k"));
}

#[test]
fn nested_objects_apply_their_own_whitelist() {
    let spec = Spec::new().field(
        "lines",
        ValueSpec::array(ValueSpec::object(
            Spec::new()
                .field("sku", ValueSpec::Any)
                .field("price", ValueSpec::Decimal)
                .env("trace_id"),
        )),
    );
    assert_eq!(
        ok(
            r#"{"lines":[{"price":"9.90","sku":"A","trace_id":"t","x":1},{"sku":"B","price":null}]}"#,
            &spec
        ),
        r#"{"lines":[{"price":9.9,"sku":"A"},{"sku":"B"}]}"#
    );
    let e = err(r#"{"lines":[{"sku":"A"},{"price":"x"}]}"#, &spec);
    assert_eq!(e.path(), Some("$.lines[1].price"));
    assert_eq!(err(r#"{"lines":[[]]}"#, &spec).kind(), "unexpected_type");
}

#[test]
fn enums_are_externally_tagged() {
    let spec = one(ValueSpec::enumeration([
        ("Cash", None),
        (
            "Card",
            Some(ValueSpec::object(
                Spec::new().field("last4", ValueSpec::Any),
            )),
        ),
        ("Amount", Some(ValueSpec::Decimal)),
    ]));
    assert_eq!(ok(r#"{"v":"Cash"}"#, &spec), r#"{"v":"Cash"}"#);
    assert_eq!(ok(r#"{"v":{"Cash":null}}"#, &spec), r#"{"v":"Cash"}"#);
    assert_eq!(
        ok(r#"{"v":{"Card":{"last4":"4242","cvc":"1"}}}"#, &spec),
        r#"{"v":{"Card":{"last4":"4242"}}}"#
    );
    assert_eq!(
        ok(r#"{"v":{"Amount":"1.0"}}"#, &spec),
        r#"{"v":{"Amount":1}}"#
    );
    assert_eq!(
        ok(r#"{"v":{"Amount":null}}"#, &spec),
        r#"{"v":{"Amount":null}}"#
    );
    let e = err(r#"{"v":"Cheque"}"#, &spec);
    assert_eq!(e.kind(), "unknown_variant");
    assert!(
        e.to_string()
            .contains("expected one of `Cash`, `Card`, `Amount`")
    );
    assert_eq!(err(r#"{"v":"Card"}"#, &spec).kind(), "invalid_variant");
    assert_eq!(err(r#"{"v":{"Cash":1}}"#, &spec).kind(), "invalid_variant");
    assert_eq!(
        err(r#"{"v":{"Cash":null,"Card":{}}}"#, &spec).kind(),
        "unexpected_type"
    );
    assert_eq!(err(r#"{"v":{}}"#, &spec).kind(), "unexpected_type");
    assert_eq!(
        err(r#"{"v":{"Amount":"x"}}"#, &spec).path(),
        Some("$.v.Amount")
    );
}

#[test]
fn depth_is_limited_on_both_paths() {
    let nest = |n: usize| format!(r#"{{"v":{}1{}}}"#, "[".repeat(n - 1), "]".repeat(n - 1));
    let spec = one(ValueSpec::Any);
    assert!(both(&nest(64), &spec).is_ok());
    let e = err(&nest(65), &spec);
    assert_eq!(e.kind(), "too_deep");
    assert_eq!(e.path(), Some(format!("$.v{}", "[0]".repeat(63)).as_str()));
    assert!(e.to_string().contains("deeper than 64 levels"));
    // Dropped members count too: the limit protects the parser.
    assert_eq!(err(&nest(65), &Spec::new()).kind(), "too_deep");
    let shallow = Canonicalizer::new().max_depth(1);
    assert!(shallow.canonicalize(&json!({"v": 1}), &spec).is_ok());
    assert_eq!(
        shallow
            .canonicalize(&json!({"v": []}), &spec)
            .unwrap_err()
            .kind(),
        "too_deep"
    );
    assert_eq!(
        Canonicalizer::new().max_depth(usize::MAX),
        Canonicalizer::new().max_depth(Canonicalizer::MAX_MAX_DEPTH)
    );
}

#[test]
fn raw_path_rejects_duplicates_and_bad_json() {
    let spec = one(ValueSpec::Any);
    let e = canonicalize_slice(br#"{"v":1,"v":1}"#, &spec).unwrap_err();
    assert_eq!((e.kind(), e.path()), ("duplicate_member", Some("$")));
    let e = canonicalize_slice(br#"{"x":{"a":1,"a":2}}"#, &spec).unwrap_err();
    assert_eq!((e.kind(), e.path()), ("duplicate_member", Some("$.x")));
    for bad in ["{", r#"{"v":01}"#, r#"{"v":1,}"#, r#"{"v":NaN}"#, "{} {}"] {
        assert_eq!(
            canonicalize_slice(bad.as_bytes(), &spec)
                .unwrap_err()
                .kind(),
            "invalid_json",
            "{bad}"
        );
    }
}

#[test]
fn fingerprints_hash_the_canonical_text() {
    let spec = one(ValueSpec::Decimal);
    let want = RequestHash::of_bytes(br#"{"v":100}"#);
    assert_eq!(
        fingerprint_slice(br#"{"v":"100.00"}"#, &spec).unwrap(),
        want
    );
    assert_eq!(fingerprint(&json!({"v": 1e2}), &spec).unwrap(), want);
    use sha2::Digest as _;
    let hex: String = sha2::Sha256::digest(br#"{"v":100}"#)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(want.to_string(), hex);
}
