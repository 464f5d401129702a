//! `idem_fuzz::header_key`: the properties are documented there.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::header_key(data));
