//! `#[derive(Fingerprint)]` and `#[derive(Snapshot)]` on prost messages and oneofs, written as
//! prost-build emits them (with the attributes `type_attribute` / `field_attribute` add): the
//! canonical forms of docs/fingerprint.md, "Protocol Buffers messages".

use std::collections::{BTreeMap, HashMap};

use idem::{Fingerprint, Snapshot};
use prost::Message;
use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Currency {
    Unspecified = 0,
    Eur = 1,
    Usd = 2,
}

#[derive(Clone, PartialEq, prost::Message, Fingerprint)]
pub struct Card {
    #[prost(string, tag = "1")]
    pub token: ::prost::alloc::string::String,
    #[prost(uint32, tag = "2")]
    pub exp_year: u32,
}

#[derive(Clone, PartialEq, prost::Message, Fingerprint)]
pub struct CreatePayment {
    #[prost(string, tag = "1")]
    pub order_id: ::prost::alloc::string::String,
    #[prost(int64, tag = "2")]
    pub amount_minor: i64,
    #[prost(bytes = "vec", tag = "3")]
    pub memo: ::prost::alloc::vec::Vec<u8>,
    #[prost(message, optional, tag = "4")]
    pub card: ::core::option::Option<Card>,
    #[prost(enumeration = "Currency", tag = "5")]
    pub currency: i32,
    #[prost(string, repeated, tag = "6")]
    pub tags: ::prost::alloc::vec::Vec<::prost::alloc::string::String>,
    #[prost(map = "string, string", tag = "7")]
    pub metadata:
        ::std::collections::HashMap<::prost::alloc::string::String, ::prost::alloc::string::String>,
    #[prost(int64, optional, tag = "8")]
    pub tip_minor: ::core::option::Option<i64>,
    #[prost(oneof = "create_payment::Method", tags = "9, 10")]
    pub method: ::core::option::Option<create_payment::Method>,
    #[prost(string, tag = "11")]
    #[fingerprint(env)]
    pub client_ip: ::prost::alloc::string::String,
    #[prost(bool, tag = "12")]
    pub capture: bool,
    #[prost(message, optional, tag = "13")]
    pub note: ::core::option::Option<::prost::alloc::string::String>,
    #[prost(message, optional, tag = "14")]
    pub proof: ::core::option::Option<::prost::alloc::vec::Vec<u8>>,
    #[prost(btree_map = "int64, bytes", tag = "15")]
    pub blobs: ::prost::alloc::collections::BTreeMap<i64, ::prost::alloc::vec::Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "16")]
    pub chunks: ::prost::alloc::vec::Vec<::prost::alloc::vec::Vec<u8>>,
    #[prost(message, repeated, tag = "17")]
    pub cards: ::prost::alloc::vec::Vec<Card>,
    #[prost(double, tag = "18")]
    #[fingerprint(float)]
    pub rate: f64,
    #[prost(message, optional, tag = "19")]
    pub empty: ::core::option::Option<()>,
}

pub mod create_payment {
    #[derive(Clone, PartialEq, prost::Oneof, idem::Fingerprint)]
    pub enum Method {
        #[prost(message, tag = "9")]
        Card(super::Card),
        #[prost(string, tag = "10")]
        Iban(::prost::alloc::string::String),
        #[prost(bytes, tag = "20")]
        WalletToken(::prost::alloc::vec::Vec<u8>),
    }
}
use create_payment::Method;

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[track_caller]
fn assert_canonical<T: Fingerprint>(v: &T, expected: &str) {
    assert_eq!(v.canonical_json(), expected);
    assert_eq!(v.fingerprint().to_string(), sha256_hex(expected));
}

fn full() -> CreatePayment {
    CreatePayment {
        order_id: "ord_1".into(),
        amount_minor: 1050,
        memo: b"hi!?".to_vec(),
        card: Some(Card {
            token: "tok".into(),
            exp_year: 2030,
        }),
        currency: Currency::Eur as i32,
        tags: vec!["b".into(), "a".into()],
        metadata: [
            ("z".to_owned(), "1".to_owned()),
            ("a".to_owned(), String::new()),
        ]
        .into_iter()
        .collect(),
        tip_minor: Some(0),
        method: Some(Method::Iban("DE00".into())),
        client_ip: "203.0.113.9".into(),
        capture: true,
        note: Some(String::new()),
        proof: Some(b"p".to_vec()),
        blobs: [(10, b"x".to_vec()), (9, Vec::new()), (-1, b"y".to_vec())]
            .into_iter()
            .collect(),
        chunks: vec![b"a".to_vec(), Vec::new()],
        cards: vec![Card::default()],
        rate: 0.25,
        empty: Some(()),
    }
}

#[test]
fn every_shape_has_one_canonical_text() {
    assert_canonical(
        &full(),
        concat!(
            r#"{"amount_minor":1050,"blobs":{"-1":"eQ==","10":"eA==","9":""},"capture":true,"#,
            r#""card":{"exp_year":2030,"token":"tok"},"cards":[{}],"chunks":["YQ==",""],"#,
            r#""currency":1,"empty":{},"iban":"DE00","memo":"aGkhPw==","#,
            r#""metadata":{"a":"","z":"1"},"note":"","order_id":"ord_1","proof":"cA==","#,
            r#""rate":0.25,"tags":["b","a"],"tip_minor":0}"#
        ),
    );
}

#[test]
fn proto3_defaults_are_absent_by_construction() {
    // Everything at its default: nothing is written, as for an empty message.
    assert_canonical(&CreatePayment::default(), "{}");
    let sent_zero = CreatePayment {
        amount_minor: 0,
        order_id: "ord_1".into(),
        ..Default::default()
    };
    let omitted = CreatePayment::decode(&b"\x0a\x05ord_1"[..]).unwrap();
    assert_eq!(sent_zero.fingerprint(), omitted.fingerprint());
    assert_canonical(&omitted, r#"{"order_id":"ord_1"}"#);
    // A field added to the message later, unused, changes nothing: the message without it.
    #[derive(Clone, PartialEq, prost::Message, Fingerprint)]
    struct Before {
        #[prost(string, tag = "1")]
        order_id: String,
    }
    let before = Before {
        order_id: "ord_1".into(),
    };
    assert_eq!(before.fingerprint(), omitted.fingerprint());
    // Negative zero is zero (prost does not send it either).
    let negative_zero = CreatePayment {
        rate: -0.0,
        ..Default::default()
    };
    assert_canonical(&negative_zero, "{}");
    assert!(negative_zero.encode_to_vec().is_empty());
}

#[test]
fn presence_is_kept_where_the_field_has_it() {
    let base = CreatePayment::default();
    let cases: [(CreatePayment, &str); 6] = [
        (
            CreatePayment {
                tip_minor: Some(0),
                ..Default::default()
            },
            r#"{"tip_minor":0}"#,
        ),
        (
            CreatePayment {
                card: Some(Card::default()),
                ..Default::default()
            },
            r#"{"card":{}}"#,
        ),
        (
            CreatePayment {
                note: Some(String::new()),
                ..Default::default()
            },
            r#"{"note":""}"#,
        ),
        (
            CreatePayment {
                method: Some(Method::Iban(String::new())),
                ..Default::default()
            },
            r#"{"iban":""}"#,
        ),
        (
            CreatePayment {
                empty: Some(()),
                ..Default::default()
            },
            r#"{"empty":{}}"#,
        ),
        (
            CreatePayment {
                proof: Some(Vec::new()),
                ..Default::default()
            },
            r#"{"proof":""}"#,
        ),
    ];
    for (message, text) in cases {
        assert_canonical(&message, text);
        assert_ne!(message.fingerprint(), base.fingerprint(), "{text}");
        // The wire keeps the difference too.
        assert_ne!(message.encode_to_vec(), base.encode_to_vec(), "{text}");
    }
}

#[test]
fn enums_are_their_numbers() {
    let eur = CreatePayment {
        currency: Currency::Eur as i32,
        ..Default::default()
    };
    assert_canonical(&eur, r#"{"currency":1}"#);
    // A value this build has no name for (an open enum) still has a fingerprint.
    let unknown = CreatePayment {
        currency: 42,
        ..Default::default()
    };
    assert_canonical(&unknown, r#"{"currency":42}"#);
    let unspecified = CreatePayment {
        currency: Currency::Unspecified as i32,
        ..Default::default()
    };
    assert_canonical(&unspecified, "{}");
}

#[test]
fn a_oneof_is_its_set_member_at_the_message_level() {
    let card = Card {
        token: "t".into(),
        exp_year: 0,
    };
    let by_card = CreatePayment {
        amount_minor: 5,
        method: Some(Method::Card(card.clone())),
        order_id: "o".into(),
        ..Default::default()
    };
    // Between `amount_minor` and `order_id`, in byte order.
    assert_canonical(
        &by_card,
        r#"{"amount_minor":5,"card":{"token":"t"},"order_id":"o"}"#,
    );
    let by_wallet = CreatePayment {
        method: Some(Method::WalletToken(b"w".to_vec())),
        ..Default::default()
    };
    assert_canonical(&by_wallet, r#"{"wallet_token":"dw=="}"#);
    // The oneof on its own: a one-member object.
    assert_canonical(&Method::Card(card), r#"{"card":{"token":"t"}}"#);
    assert_canonical(&Method::Iban("x".into()), r#"{"iban":"x"}"#);
}

#[test]
fn oneofs_merge_in_byte_order_with_each_other() {
    #[derive(Clone, PartialEq, prost::Message, Fingerprint)]
    struct Two {
        #[prost(string, tag = "1")]
        m: String,
        #[prost(oneof = "two::A", tags = "2, 3")]
        a: Option<two::A>,
        #[prost(oneof = "two::B", tags = "4, 5")]
        b: Option<two::B>,
    }
    mod two {
        #[derive(Clone, PartialEq, prost::Oneof, idem::Fingerprint)]
        pub enum A {
            #[prost(int32, tag = "2")]
            Zeta(i32),
            #[prost(int32, tag = "3")]
            Alpha(i32),
        }
        #[derive(Clone, PartialEq, prost::Oneof, idem::Fingerprint)]
        pub enum B {
            #[prost(int32, tag = "4")]
            Beta(i32),
            #[prost(int32, tag = "5")]
            Nu(i32),
        }
    }
    let two = |a, b| Two {
        m: "x".into(),
        a: Some(a),
        b: Some(b),
    };
    assert_canonical(
        &two(two::A::Zeta(0), two::B::Beta(1)),
        r#"{"beta":1,"m":"x","zeta":0}"#,
    );
    assert_canonical(
        &two(two::A::Alpha(2), two::B::Nu(3)),
        r#"{"alpha":2,"m":"x","nu":3}"#,
    );
    assert_canonical(
        &Two {
            a: Some(two::A::Alpha(1)),
            ..Default::default()
        },
        r#"{"alpha":1}"#,
    );
}

#[test]
fn maps_are_objects_whatever_their_iteration_order() {
    let mut a = HashMap::new();
    let mut b = HashMap::new();
    for i in 0..50 {
        a.insert(format!("k{i}"), i.to_string());
    }
    for i in (0..50).rev() {
        b.insert(format!("k{i}"), i.to_string());
    }
    let a = CreatePayment {
        metadata: a,
        ..Default::default()
    };
    let b = CreatePayment {
        metadata: b,
        ..Default::default()
    };
    assert_eq!(a.canonical_json(), b.canonical_json());
    assert!(
        a.canonical_json()
            .starts_with(r#"{"metadata":{"k0":"0","k1":"1","k10":"10""#)
    );
    // Integer keys sort by their text, not their value.
    let blobs: BTreeMap<i64, Vec<u8>> = [(100, vec![]), (20, vec![]), (3, vec![])].into();
    assert_canonical(
        &CreatePayment {
            blobs,
            ..Default::default()
        },
        r#"{"blobs":{"100":"","20":"","3":""}}"#,
    );
}

#[test]
fn whitelists_and_env_fields() {
    let a = full();
    let b = CreatePayment {
        client_ip: "198.51.100.1".into(),
        ..full()
    };
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert!(!a.canonical_json().contains("client_ip"));
    let amount = idem::fields!(CreatePayment: amount_minor, currency, method);
    assert_eq!(
        a.fingerprint_fields(amount),
        idem::RequestHash::of_bytes(br#"{"amount_minor":1050,"currency":1,"iban":"DE00"}"#)
    );
    let no_oneof = idem::fields!(CreatePayment: amount_minor);
    assert_eq!(
        a.fingerprint_fields(no_oneof),
        idem::RequestHash::of_bytes(br#"{"amount_minor":1050}"#)
    );
}

#[derive(Clone, PartialEq, prost::Message, Snapshot)]
pub struct Payment {
    #[prost(string, tag = "1")]
    #[snapshot(biz_no)]
    pub payment_id: String,
    #[prost(int64, tag = "2")]
    pub amount_minor: i64,
    #[prost(enumeration = "Currency", tag = "3")]
    pub currency: i32,
}

#[test]
fn snapshot_biz_no_and_from_biz_no() {
    let p = Payment {
        payment_id: "pay_1".into(),
        amount_minor: 100,
        currency: 1,
    };
    assert_eq!(Payment::BIZ_NO_FIELD, "payment_id");
    assert_eq!(p.biz_no(), "pay_1");
    assert_eq!(
        Payment::from_biz_no("pay_1"),
        Some(Payment {
            payment_id: "pay_1".into(),
            ..Default::default()
        })
    );
    // A response type that is not a prost message has no such constructor.
    #[derive(serde::Serialize, Snapshot, Default)]
    struct Json {
        #[snapshot(biz_no)]
        id: String,
    }
    assert!(Json::from_biz_no("x").is_none());
    assert_eq!(Json::default().biz_no(), "");
}

#[cfg(feature = "prost")]
#[test]
fn well_known_types() {
    use prost_types::{Duration, Timestamp};
    #[derive(Clone, PartialEq, prost::Message, Fingerprint)]
    struct Schedule {
        #[prost(message, optional, tag = "1")]
        at: Option<Timestamp>,
        #[prost(message, optional, tag = "2")]
        after: Option<Duration>,
        #[prost(message, optional, tag = "3")]
        #[fingerprint(env)]
        sent_at: Option<Timestamp>,
        #[prost(message, optional, tag = "4")]
        limit: Option<i64>,
    }
    let s = Schedule {
        at: Some(Timestamp {
            seconds: 1_704_164_645,
            nanos: 500_000_000,
        }),
        after: Some(Duration {
            seconds: 90,
            nanos: 250_000_000,
        }),
        sent_at: Some(Timestamp::default()),
        limit: Some(0),
    };
    assert_canonical(
        &s,
        r#"{"after":"90.25s","at":"2024-01-02T03:04:05.5Z","limit":0}"#,
    );
    assert_canonical(
        &Schedule {
            at: Some(Timestamp::default()),
            after: Some(Duration::default()),
            ..Default::default()
        },
        r#"{"after":"0s","at":"1970-01-01T00:00:00Z"}"#,
    );
    assert_canonical(&Schedule::default(), "{}");
}
