// `#[fingerprint(crate = "..")]` for a renamed or re-exported idem.
mod vendored {
    pub use ::idem as idem_v1;
}

#[derive(idem::Fingerprint)]
#[fingerprint(crate = "crate::vendored::idem_v1")]
struct Quoted {
    amount: u64,
}

#[derive(idem::Fingerprint)]
#[fingerprint(crate = crate::vendored::idem_v1)]
struct Unquoted(u64);

fn main() {
    use idem::Fingerprint;
    assert_eq!(Quoted { amount: 1 }.canonical_json(), r#"{"amount":1}"#);
    assert_eq!(Unquoted(2).canonical_json(), "2");
}
