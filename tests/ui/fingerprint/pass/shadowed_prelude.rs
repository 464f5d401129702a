// Generated code names only absolute paths: user types called `Option`, `String`, `Vec`,
// `bool`, `Result`, `Box`, `Some`, `None` (and no prelude at all) change nothing.
#![allow(non_camel_case_types, dead_code)]

mod shadowing {
    use idem::Fingerprint;

    pub struct Option;
    pub struct String;
    pub struct Vec;
    pub struct bool;
    pub struct Box;
    pub struct Result;
    pub struct Some;
    pub struct None;
    pub struct Canonical;
    pub struct CanonicalWriter;
    pub mod core {}
    pub mod std {}

    #[derive(Fingerprint)]
    pub struct Request {
        pub amount: u64,
        pub note: ::std::option::Option<::std::string::String>,
        pub tags: ::std::vec::Vec<u8>,
        pub capture: ::core::primitive::bool,
        #[fingerprint(env)]
        pub client_ip: ::std::string::String,
    }

    #[derive(Fingerprint)]
    pub struct Unit;

    #[derive(Fingerprint)]
    pub struct Pair(pub u8, pub u16);

    #[derive(Fingerprint)]
    pub enum Kind {
        A,
        B(u8),
        C(u8, u16),
        D { x: u8 },
    }
}

#[no_implicit_prelude]
mod no_prelude {
    #[derive(::idem::Fingerprint)]
    pub struct Request {
        pub amount: u64,
        pub note: ::std::option::Option<::std::string::String>,
        pub pair: [u8; 2],
        pub kind: Kind,
    }

    #[derive(::idem::Fingerprint)]
    pub enum Kind {
        A,
        B(u8),
        C(u8, u16),
        D { x: u8 },
    }
}

fn main() {
    use idem::Fingerprint;
    let r = shadowing::Request {
        amount: 1,
        note: None,
        tags: vec![2],
        capture: true,
        client_ip: "1.2.3.4".into(),
    };
    assert_eq!(r.canonical_json(), r#"{"amount":1,"capture":true,"tags":[2]}"#);
    let mask = idem::fields!(shadowing::Request: amount, tags);
    assert_eq!(
        r.fingerprint_fields(mask),
        idem::RequestHash::of_bytes(br#"{"amount":1,"tags":[2]}"#)
    );
    let n = no_prelude::Request {
        amount: 1,
        note: Some("n".into()),
        pair: [1, 2],
        kind: no_prelude::Kind::C(3, 4),
    };
    assert_eq!(
        n.canonical_json(),
        r#"{"amount":1,"kind":{"C":[3,4]},"note":"n","pair":[1,2]}"#
    );
}
