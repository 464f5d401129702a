//! Instruction counts of the fingerprint paths, for machines too noisy to time them.
//!
//! `scripts/bench-instructions` runs this under valgrind's callgrind: once per path with a large
//! and a small iteration count, so that the difference is the cost of the iterations alone. Run
//! directly (`cargo bench --bench fingerprint_count`), it only checks that every path gives the
//! same fingerprint. Under valgrind SHA-256 runs its portable code (valgrind does not emulate the
//! CPU's SHA extensions), so the counts also show the ratio on CPUs without them.
#![allow(missing_docs)]

use std::hint::black_box;

use idem::Fingerprint;
use sha2::{Digest, Sha256};

#[path = "common/payment.rs"]
mod payment;

fn main() {
    let req = payment::request();
    let spec = payment::spec();
    let canonical = req.canonical_json();
    let value = serde_json::to_value(&req).expect("serializable");
    let floor = idem::RequestHash::of_bytes(canonical.as_bytes());
    assert_eq!(req.fingerprint(), floor);
    assert_eq!(
        idem::json::fingerprint(&value, &spec).expect("canonical"),
        floor
    );

    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let (Some(path), Some(iterations)) = (args.next(), args.next()) else {
        return;
    };
    let iterations: u64 = iterations.parse().expect("an iteration count");
    for _ in 0..iterations {
        match path.as_str() {
            "sha256_precomputed" => {
                black_box(Sha256::digest(black_box(canonical.as_bytes())));
            }
            "derive" => {
                black_box(black_box(&req).fingerprint());
            }
            "runtime_value" => {
                black_box(idem::json::fingerprint(black_box(&value), &spec).expect("ok"));
            }
            other => panic!("unknown path {other}"),
        }
    }
}
