//! Unit tests of the key rules: RFC 8941 sf-strings and bare keys, value keys, scopes.

use super::*;

fn key(v: &str) -> Result<String, InvalidKey> {
    parse_header_key(v.as_bytes())
}

#[test]
fn sf_strings_unquote_and_unescape() {
    assert_eq!(key(r#""abc""#).unwrap(), "abc");
    assert_eq!(key(r#""a b c""#).unwrap(), "a b c"); // spaces are printable ASCII
    assert_eq!(key(r#""q\"uote""#).unwrap(), r#"q"uote"#);
    assert_eq!(key(r#""back\\slash""#).unwrap(), r"back\slash");
    assert_eq!(key(r#""\\\"""#).unwrap(), r#"\""#);
    assert_eq!(key("  \"padded\"\t").unwrap(), "padded");
    // Every printable ASCII character but `"` and `\` stands for itself.
    let printable: String = (0x20u8..=0x7e)
        .map(char::from)
        .filter(|c| !matches!(c, '"' | '\\'))
        .collect();
    assert_eq!(key(&format!("\"{printable}\"")).unwrap(), printable);
}

#[test]
fn malformed_sf_strings() {
    for (v, reason) in [
        (r#""abc"#, "no closing quote"),
        (r#"""#, "no closing quote"),
        (r#""a\x""#, "an escape other than"),
        (r#""a\n""#, "an escape other than"),
        ("\"a\\", "a backslash at the end"),
        (r#""abc"d"#, "characters after the closing quote"),
        (r#""abc";p=1"#, "characters after the closing quote"),
        ("\"caf\u{e9}\"", "a byte outside ASCII"),
    ] {
        match key(v) {
            Err(InvalidKey::MalformedString { reason: r, .. }) => {
                assert!(r.starts_with(reason), "{v:?}: {r}")
            }
            other => panic!("{v:?}: {other:?}"),
        }
    }
    assert_eq!(
        key("\"a\tb\""),
        Err(InvalidKey::ControlCharacter { code: 9, index: 2 })
    );
    assert_eq!(
        key("\"a\x7fb\""),
        Err(InvalidKey::ControlCharacter {
            code: 0x7f,
            index: 2
        })
    );
}

#[test]
fn bare_keys() {
    assert_eq!(
        key("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap(),
        "8e03978e-40d5-43e8-bc93-6894a57f9324"
    );
    assert_eq!(key("a:b/c=d+e_f.g~h!").unwrap(), "a:b/c=d+e_f.g~h!");
    assert_eq!(
        key("a b"),
        Err(InvalidKey::NotAToken {
            found: ' ',
            index: 1
        })
    );
    assert_eq!(
        key("ab\"c"),
        Err(InvalidKey::NotAToken {
            found: '"',
            index: 2
        })
    );
    assert_eq!(
        key("a\\b"),
        Err(InvalidKey::NotAToken {
            found: '\\',
            index: 1
        })
    );
    assert!(matches!(
        key("caf\u{e9}"),
        Err(InvalidKey::NotAToken {
            found: char::REPLACEMENT_CHARACTER,
            ..
        })
    ));
    assert_eq!(
        key("a\x01"),
        Err(InvalidKey::ControlCharacter { code: 1, index: 1 })
    );
}

#[test]
fn lengths() {
    assert_eq!(key(""), Err(InvalidKey::Empty));
    assert_eq!(key("   "), Err(InvalidKey::Empty));
    assert_eq!(key(r#""""#), Err(InvalidKey::Empty));
    assert_eq!(key(&"k".repeat(255)).unwrap().len(), 255);
    assert_eq!(
        key(&"k".repeat(256)),
        Err(InvalidKey::TooLong { chars: 256 })
    );
    // The limit applies to the key, not to the quoted form.
    assert_eq!(key(&format!("\"{}\"", "k".repeat(255))).unwrap().len(), 255);
    assert_eq!(
        key(&format!("\"{}\"", "k".repeat(256))),
        Err(InvalidKey::TooLong { chars: 256 })
    );
    // An escaped character counts once.
    assert_eq!(
        key(&format!("\"{}\"", r#"\""#.repeat(255))).unwrap().len(),
        255
    );
}

#[test]
fn sf_and_bare_forms_name_the_same_key() {
    assert_eq!(key("\"k-1\"").unwrap(), key("k-1").unwrap());
    let a = ScopedKey::new::<&str>(&[], "op", &key("\"k-1\"").unwrap()).unwrap();
    let b = ScopedKey::new::<&str>(&[], "op", &key("k-1").unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn key_errors_say_what_to_do() {
    for e in [
        InvalidKey::Empty,
        InvalidKey::TooLong { chars: 300 },
        InvalidKey::ControlCharacter { code: 9, index: 0 },
        InvalidKey::MalformedString {
            reason: "no closing quote",
            index: 3,
        },
        InvalidKey::NotAToken {
            found: ' ',
            index: 1,
        },
        InvalidKey::Repeated,
    ] {
        let msg = e.to_string();
        assert!(msg.contains("send"), "{msg}");
        assert!(msg.starts_with(char::is_lowercase), "{msg}");
    }
}

#[test]
fn validate_value_keys() {
    assert!(validate_key("order 7 / ünïcode").is_ok());
    assert_eq!(validate_key(""), Err(InvalidKey::Empty));
    assert_eq!(
        validate_key(&"é".repeat(256)),
        Err(InvalidKey::TooLong { chars: 256 })
    );
    assert!(validate_key(&"é".repeat(255)).is_ok());
}

#[test]
fn scopes_are_injective_for_any_arity() {
    let k = |scope: &[&dyn ScopePart]| scoped_key("op", scope, "k").unwrap();
    assert_ne!(k(&[&"a:b", &"c"]), k(&[&"a", &"b:c"]));
    assert_ne!(k(&[&"t", &"a:b", &"c"]), k(&[&"t", &"a", &"b:c"]));
    assert_ne!(k(&[&"t", &"a%3Ab", &"c"]), k(&[&"t", &"a:b", &"c"]));
    // Different numbers of parts never collide.
    assert_ne!(k(&[&"t", &"a:b"]), k(&[&"t", &"a", &"b"]));
    assert_ne!(k(&[&"t"]), k(&[&"t", &""]));
    assert_ne!(k(&[]), k(&[&""]));
    assert_eq!(k(&[&"t", &None::<&str>]), k(&[&"t", &""]));
    assert_eq!(k(&[&7u32]), k(&[&"7"]));
    assert_ne!(scoped_key("op1", &[], "k"), scoped_key("op2", &[], "k"));
}

#[cfg(feature = "axum")]
#[test]
fn header_value_scope_parts_escape() {
    let v = http::HeaderValue::from_bytes(b"a%b c\xff").unwrap();
    assert_eq!(write_scope_part(&v), "a%25b%20c%FF");
}

#[test]
fn validation_reads_ascii_and_other_keys_alike() {
    // ASCII keys take a byte-wise path, others a per-character one: same rules, same answers.
    assert_eq!(validate_key(&"k".repeat(255)), Ok(()));
    assert_eq!(
        validate_key(&"k".repeat(256)),
        Err(InvalidKey::TooLong { chars: 256 })
    );
    assert_eq!(validate_key(&"é".repeat(255)), Ok(()));
    assert_eq!(
        validate_key(&format!("é{}", "k".repeat(255))),
        Err(InvalidKey::TooLong { chars: 256 })
    );
    assert_eq!(
        validate_key("ab\u{7f}"),
        Err(InvalidKey::ControlCharacter {
            code: 0x7f,
            index: 2
        })
    );
    assert_eq!(
        validate_key("\tab"),
        Err(InvalidKey::ControlCharacter { code: 9, index: 0 })
    );
    // A C1 control character (U+0085) is not ASCII: found by the per-character path, its
    // index counted in characters.
    assert_eq!(
        validate_key("éa\u{85}"),
        Err(InvalidKey::ControlCharacter {
            code: 0x85,
            index: 2
        })
    );
}

/// A refused key is never echoed, not even the character at fault: its class and position.
#[test]
fn key_errors_do_not_echo_the_key() {
    for (value, says) in [
        (&b"sk_live_51Hx secret"[..], "a space at byte 12"),
        (b"sk_live_51Hx\"secret", "a double quote at byte 12"),
        (
            b"sk_live_51Hx\xc3\xa9secret",
            "a byte outside ASCII at byte 12",
        ),
    ] {
        let e = parse_header_key(value).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(says), "{msg}");
        assert!(!msg.contains("sk_live") && !msg.contains('\''), "{msg}");
    }
}
