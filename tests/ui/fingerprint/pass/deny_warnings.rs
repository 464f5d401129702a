// The expansion is warning-free wherever the type lives: public types in private modules,
// types inside functions, public modules, with the strictest common lints.
#![deny(warnings, missing_debug_implementations, unused_qualifications)]

use idem::Fingerprint;

mod private {
    use idem::Fingerprint;

    #[derive(Debug, Fingerprint)]
    pub struct Public {
        pub amount: u64,
        #[fingerprint(env)]
        pub client_ip: String,
        #[fingerprint(skip)]
        pub note: String,
    }

    #[derive(Debug, Fingerprint)]
    pub(crate) enum Crate {
        A,
        B { x: u8 },
    }
}

/// Reachable from outside.
pub mod public {
    use idem::Fingerprint;

    /// A public request.
    #[derive(Debug, Fingerprint)]
    pub struct Request {
        /// Amount.
        pub amount: u64,
        /// Environment.
        #[fingerprint(env)]
        pub client_ip: String,
    }
}

fn inside_a_function() -> String {
    #[derive(Debug, Fingerprint)]
    struct Local {
        id: u32,
        #[fingerprint(env)]
        nonce: u64,
    }

    #[derive(Debug, Fingerprint)]
    struct NoHashedField {
        #[fingerprint(env)]
        nonce: u64,
    }

    let mask = idem::fields!(Local: id);
    let local = Local { id: 1, nonce: 2 };
    assert_eq!(local.fingerprint_fields(mask), local.fingerprint());
    assert_eq!(NoHashedField { nonce: 3 }.canonical_json(), "{}");
    local.canonical_json()
}

fn main() {
    let p = private::Public {
        amount: 1,
        client_ip: String::new(),
        note: String::new(),
    };
    assert_eq!(p.canonical_json(), r#"{"amount":1}"#);
    assert_eq!(private::Crate::A.canonical_json(), r#""A""#);
    assert_eq!(private::Crate::B { x: 1 }.canonical_json(), r#"{"B":{"x":1}}"#);
    let r = public::Request {
        amount: 2,
        client_ip: String::new(),
    };
    assert_eq!(r.canonical_json(), r#"{"amount":2}"#);
    assert_eq!(inside_a_function(), r#"{"id":1}"#);
}
