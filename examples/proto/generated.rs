//! The code generated from `examples/proto/payments.proto` (`payments.v1.rs`), and the
//! fingerprint of its decimal strings, which the generated messages name as
//! `super::decimal_text` (`docs/grpc.md`): shared by the gRPC examples.

use std::str::FromStr;

use idem::fingerprint::{Canonical, CanonicalWriter};
use rust_decimal::Decimal;

/// The code generated from `examples/proto/payments.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    include!("payments.v1.rs");
}

/// The canonical form of a decimal string: `"100"`, `"100.0"` and `"100.00"` are one number.
/// A string that is no decimal is fingerprinted as the string (and refused by the method).
fn decimal_text(text: &String, w: &mut CanonicalWriter<'_>) {
    match Decimal::from_str(text) {
        Ok(amount) => amount.write_canonical(w),
        Err(_) => text.write_canonical(w),
    }
}
