//! Compile-time behaviour of `#[derive(Fingerprint)]`, `idem::fields!`, `#[idempotent]` and
//! `#[derive(Snapshot)]`: every mistake is a
//! compile error with our message at the user's token (`tests/ui/**/fail`), and the valid corner
//! cases compile warning-free (`tests/ui/**/pass`).
//!
//! Regenerate the expected `.stderr` files with `TRYBUILD=overwrite cargo test -p idem-ui-tests`, and
//! read the diff before committing.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("fingerprint/fail/*.rs");
    t.pass("fingerprint/pass/*.rs");
    t.compile_fail("fields/fail/*.rs");
    t.pass("fields/pass/*.rs");
    t.compile_fail("idempotent/fail/*.rs");
    t.pass("idempotent/pass/*.rs");
    t.compile_fail("snapshot/fail/*.rs");
    t.pass("snapshot/pass/*.rs");
}
