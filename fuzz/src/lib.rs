//! The properties the fuzz targets check, one function per target: each takes the fuzzer's bytes
//! and panics when a property fails (`docs/reliability.md`, "Fuzzing").
//!
//! This file is also compiled into idem-runtime's stable test suite
//! (`idem-runtime/tests/fuzz_corpus.rs`, as a module), which replays the committed seeds, corpus
//! and regressions through it: it may use only `idem_runtime`, `serde_json` and `std`.

use std::sync::LazyLock;

use idem_runtime::__fuzz::{decode_headers, encode_headers};
use idem_runtime::json::{
    CanonicalError, Canonicalizer, Spec, ValueSpec, canonicalize, canonicalize_slice,
};
use idem_runtime::key::{parse_header_key, validate_key};
use serde_json::Value;

/// The ways every body is canonicalized: a name (for messages), the options and the spec.
struct Setup {
    name: &'static str,
    canonicalizer: Canonicalizer,
    spec: Spec,
}

/// Names the fuzzer finds in the comparisons anyway, listed so that short inputs reach them.
const ANY_NAMES: &[&str] = &[
    "", "a", "b", "c", "d", "n", "s", "v", "x", "y", "z", "A", "B", "a b", "a\"b", "é", "中", "😀",
];

/// One field of every kind, under short names, and the example of `docs/fingerprint.md`.
const TYPED_SPEC: &str = r#"{
    "amount": "decimal",
    "currency": "any",
    "lines": {"array": {"object": {"sku": "any", "qty": "decimal", "trace_id": "env"}}},
    "tags": {"set": "any"},
    "method": {"enum": {"Cash": null, "Card": {"object": {"last4": "any"}}, "Amount": "decimal"}},
    "client_ip": "env",
    "timestamp": "env",
    "a": "any",
    "b": "base64",
    "d": "decimal",
    "t": "timestamp",
    "day": "date",
    "u": "uuid",
    "tu": {"tuple": ["decimal", "any", {"array": "base64"}]},
    "m": {"map": "decimal"},
    "s": {"set": "decimal"},
    "su": {"set": "uuid"},
    "o": {"object": {"a": "any", "d": "decimal", "ts": "env", "o": {"object": {"t": "timestamp"}}}},
    "e": {"enum": {"U": null, "D": "decimal", "O": {"object": {"x": "any"}}, "T": {"tuple": ["any", "date"]}}}
}"#;

static SETUPS: LazyLock<Vec<Setup>> = LazyLock::new(|| {
    let any = ANY_NAMES
        .iter()
        .fold(Spec::new(), |spec, name| spec.field(*name, ValueSpec::Any))
        .env("ts");
    let typed = Spec::from_json_str(TYPED_SPEC).expect("TYPED_SPEC is a spec");
    vec![
        Setup {
            name: "empty spec",
            canonicalizer: Canonicalizer::new(),
            spec: Spec::new(),
        },
        Setup {
            name: "any",
            canonicalizer: Canonicalizer::new(),
            spec: any.clone(),
        },
        Setup {
            name: "any, max_depth 3",
            canonicalizer: Canonicalizer::new().max_depth(3),
            spec: any,
        },
        Setup {
            name: "typed",
            canonicalizer: Canonicalizer::new(),
            spec: typed.clone(),
        },
        Setup {
            name: "typed, deny_unknown_fields",
            canonicalizer: Canonicalizer::new().deny_unknown_fields(true),
            spec: typed,
        },
    ]
});

/// Every error is well formed: a stable kind, and a message that formats.
fn check_error(e: &CanonicalError) {
    assert!(!e.kind().is_empty());
    assert!(!e.to_string().is_empty());
}

/// The canonical text `text` of some body under `setup`: a fixed point of the canonicalizer
/// (which also proves it strict JSON), and JSON to serde_json too, except for numbers an `f64`
/// cannot hold.
fn check_canonical_text(text: &str, canonicalizer: &Canonicalizer, spec: &Spec, what: &str) {
    match canonicalizer.canonicalize_slice(text.as_bytes(), spec) {
        Ok(again) => assert_eq!(
            again, text,
            "{what}: the canonical text is not a fixed point"
        ),
        Err(e) => panic!("{what}: the canonical text {text:?} is refused: {e}"),
    }
    if let Err(e) = serde_json::from_str::<Value>(text) {
        assert!(
            e.to_string().starts_with("number out of range"),
            "{what}: serde_json refuses the canonical text {text:?}: {e}"
        );
    }
}

/// `canonical_slice`: [`Canonicalizer::canonicalize_slice`] on arbitrary bytes under every setup
/// never panics; errors are well formed; an accepted body's canonical text is a fixed point
/// (canonicalizing it again gives the same bytes) and valid JSON.
pub fn canonical_slice(data: &[u8]) {
    for setup in SETUPS.iter() {
        match setup.canonicalizer.canonicalize_slice(data, &setup.spec) {
            Ok(text) => check_canonical_text(&text, &setup.canonicalizer, &setup.spec, setup.name),
            Err(e) => check_error(&e),
        }
    }
}

/// `canonical_differential`: the raw path's strict parser and serde_json (without
/// `arbitrary_precision`) accept the same bytes, apart from duplicate member names (serde_json
/// keeps the last occurrence), numbers beyond `f64` (serde_json refuses them) and serde_json's
/// depth limit (128); and when serde_json parses the bytes:
///
/// * under every setup, the `Value` path equals the raw path over serde_json's own serialization
///   of the value (`canonicalize(&v) == canonicalize_slice(to_vec(&v))`, results and errors
///   alike);
/// * under every setup, when the body has no duplicate member name and every number of it is
///   one the `Value` path writes exactly (its canonical text is the same through both paths),
///   the raw path and the `Value` path give the same result: equal texts, or errors of the same
///   kind (and path, except `too_deep`, found in text order by the raw parser and in name order
///   by the `Value` path).
pub fn canonical_differential(data: &[u8]) {
    // The raw parser alone: an empty spec drops every member, a top-level value that is not an
    // object is refused after parsing.
    let parsed = Canonicalizer::new()
        .max_depth(Canonicalizer::MAX_MAX_DEPTH)
        .canonicalize_slice(data, &Spec::new());
    let raw_parses = match &parsed {
        Ok(_) => true,
        Err(e) => e.kind() == "unexpected_type",
    };
    let value = match serde_json::from_slice::<Value>(data) {
        Ok(value) => value,
        Err(e) => {
            let reason = e.to_string();
            assert!(
                !raw_parses
                    || reason.starts_with("number out of range")
                    || reason.starts_with("recursion limit exceeded"),
                "the raw parser accepts what serde_json refuses: {reason}"
            );
            return;
        }
    };
    let duplicates = match &parsed {
        _ if raw_parses => false,
        Err(e) if e.kind() == "duplicate_member" => true,
        Err(e) => panic!("serde_json accepts what the raw parser refuses: {e}"),
        Ok(_) => unreachable!(),
    };
    let reserialized = serde_json::to_vec(&value).expect("a Value serializes");
    let comparable = !duplicates && number_tokens(data).iter().all(|n| number_is_exact(n));
    for setup in SETUPS.iter() {
        let (c, spec) = (&setup.canonicalizer, &setup.spec);
        let by_value = c.canonicalize(&value, spec);
        assert_eq!(
            by_value,
            c.canonicalize_slice(&reserialized, spec),
            "{}: Value path vs raw path over serde_json's serialization",
            setup.name
        );
        if !comparable {
            continue;
        }
        let raw = c.canonicalize_slice(data, spec);
        match (&raw, &by_value) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{}: raw vs Value path", setup.name),
            (Err(a), Err(b)) => {
                assert_eq!(a.kind(), b.kind(), "{}: {a} vs {b}", setup.name);
                if a.kind() != "too_deep" {
                    assert_eq!(a.path(), b.path(), "{}: {a} vs {b}", setup.name);
                }
            }
            (Ok(_), Err(_)) | (Err(_), Ok(_)) => {
                panic!("{}: raw {raw:?} vs Value {by_value:?}", setup.name)
            }
        }
    }
}

/// The texts of the numbers of a JSON text (outside strings).
fn number_tokens(json: &[u8]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => {
                i += 1;
                while let Some(&c) = json.get(i) {
                    i += if c == b'\\' { 2 } else { 1 };
                    if c == b'"' {
                        break;
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = json.get(i) {
                    i += 1;
                }
                out.push(core::str::from_utf8(&json[start..i]).expect("ASCII"));
            }
            _ => i += 1,
        }
    }
    out
}

/// Whether the `Value` path writes the number `text` as the raw path does: serde_json holds it
/// as an integer, or as an `f64` whose shortest text has the same value.
fn number_is_exact(text: &str) -> bool {
    static SPEC: LazyLock<Spec> = LazyLock::new(|| Spec::new().field("n", ValueSpec::Any));
    let raw = canonicalize_slice(format!("{{\"n\":{text}}}").as_bytes(), &SPEC);
    let Ok(number) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    let by_value = canonicalize(&serde_json::json!({ "n": number }), &SPEC);
    raw.is_ok() && raw == by_value
}

/// `header_key`: [`parse_header_key`] never panics; a key it returns has 1 to 255 characters,
/// all printable ASCII, and [`validate_key`] accepts it; the key quoted as an sf-string parses to
/// the same key, so does the header value with more spaces and tabs around it, and so does the
/// key itself when it is a valid bare key (no space, `"` or `\`).
pub fn header_key(data: &[u8]) {
    let key = match parse_header_key(data) {
        Ok(key) => key,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let chars = key.chars().count();
    assert!((1..=255).contains(&chars), "{key:?}: {chars} characters");
    assert!(
        key.bytes().all(|b| (0x20..=0x7e).contains(&b)),
        "{key:?}: not printable ASCII"
    );
    assert_eq!(validate_key(&key), Ok(()), "{key:?}");

    let mut quoted = String::with_capacity(key.len() + 2);
    quoted.push('"');
    for c in key.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    assert_eq!(
        parse_header_key(quoted.as_bytes()).as_ref(),
        Ok(&key),
        "{quoted}"
    );

    let padded = [b" \t", data, b"\t "].concat();
    assert_eq!(parse_header_key(&padded).as_ref(), Ok(&key), "{padded:?}");

    if !key.contains([' ', '"', '\\']) {
        assert_eq!(
            parse_header_key(key.as_bytes()).as_ref(),
            Ok(&key),
            "bare {key:?}"
        );
    }
}

/// `header_blob`: the stored-header blob decoder never panics; what it accepts is exactly what
/// the encoder writes (`encode(decode(b)) == b`) and decodes again to the same headers; and
/// headers cut from the bytes (`0xff` separates names and values) round-trip through the
/// encoder, with every truncation of their blob refused.
pub fn header_blob(data: &[u8]) {
    if let Some(headers) = decode_headers(data) {
        let blob = encode_headers(&headers);
        assert_eq!(
            blob, data,
            "the decoder accepted what the encoder does not write"
        );
        assert_eq!(decode_headers(&blob).as_ref(), Some(&headers));
    }
    let pieces: Vec<&[u8]> = data.split(|&b| b == 0xff).collect();
    let headers: Vec<(String, Vec<u8>)> = pieces
        .chunks(2)
        .map(|pair| {
            let name = String::from_utf8_lossy(pair[0]).into_owned();
            (name, pair.get(1).map_or_else(Vec::new, |v| v.to_vec()))
        })
        .collect();
    let blob = encode_headers(&headers);
    assert_eq!(decode_headers(&blob).as_ref(), Some(&headers));
    for cut in [blob.len() - 1, blob.len() / 2, 0] {
        assert_eq!(
            decode_headers(&blob[..cut]),
            None,
            "cut at {cut} of {blob:?}"
        );
    }
}

/// Bodies canonicalized under every spec `spec_json` reads.
const SAMPLE_BODIES: &[&str] = &[
    r#"{"a":1,"b":"x","c":[1,"2",null,{"d":true}],"d":{"e":"2024-01-02T03:04:05Z"}}"#,
    r#"{"a":"100.00","b":"aGk=","c":"2024-02-29","d":"67e55044-10b1-426f-9247-bb680e5fe0c8"}"#,
    r#"{"a":[1,[2,"x"],{"U":null}],"b":{"V":{"w":[0,255]}},"c":"U","d":[[1,2],[1,2]]}"#,
];

/// `spec_json`: [`Spec::from_json_str`] never panics on UTF-8; an error is `invalid_spec`; a spec
/// it reads is written back by [`Spec::to_json_string`] as a text that reads as the same spec
/// (and is written the same again), and canonicalizing sample bodies (and the spec's own text)
/// under it never panics and gives fixed points.
pub fn spec_json(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let spec = match Spec::from_json_str(text) {
        Ok(spec) => spec,
        Err(e) => {
            assert_eq!(e.kind(), "invalid_spec", "{e}");
            check_error(&e);
            return;
        }
    };
    let json = spec.to_json_string();
    let again = Spec::from_json_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
    assert_eq!(again, spec, "{json}");
    assert_eq!(again.to_json_string(), json);
    let c = Canonicalizer::new();
    for body in SAMPLE_BODIES.iter().copied().chain([text]) {
        match c.canonicalize_slice(body.as_bytes(), &spec) {
            Ok(canonical) => check_canonical_text(&canonical, &c, &spec, "spec_json"),
            Err(e) => check_error(&e),
        }
    }
}
