//! Compile-time behaviour of `#[derive(Fingerprint)]`, `idem::fields!`, `#[idempotent]` and
//! `#[derive(Snapshot)]`: every mistake is a
//! compile error with our message at the user's token (`tests/ui/**/fail`), and the valid corner
//! cases compile warning-free (`tests/ui/**/pass`).
//!
//! Regenerate the expected `.stderr` files with `TRYBUILD=overwrite cargo test --test ui`, and
//! read the diff before committing.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fingerprint/fail/*.rs");
    t.pass("tests/ui/fingerprint/pass/*.rs");
    t.compile_fail("tests/ui/fields/fail/*.rs");
    t.pass("tests/ui/fields/pass/*.rs");
    t.compile_fail("tests/ui/idempotent/fail/*.rs");
    t.pass("tests/ui/idempotent/pass/*.rs");
    t.compile_fail("tests/ui/snapshot/fail/*.rs");
    t.pass("tests/ui/snapshot/pass/*.rs");
}
