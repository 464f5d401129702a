//! `idem_fuzz::canonical_differential`: the properties are documented there.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::canonical_differential(data));
