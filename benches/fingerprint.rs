//! Fingerprint speed: the derive against its floor and against the alternatives.
//!
//! Run: `cargo bench --bench fingerprint` then `scripts/bench-ratios fingerprint` and
//! `scripts/bench-ratios canonical_text copy_precomputed`
//! (ratios against `sha256_precomputed`, all measured in the same run; see BENCHMARKS.md).
// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use idem::Fingerprint;
use rust_decimal::Decimal;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// An 8-field payment request: 7 identity fields and one environment field.
#[derive(Fingerprint, Serialize)]
struct CreatePayment {
    amount: Decimal,
    currency: String,
    customer_id: String,
    order_id: String,
    description: Option<String>,
    capture: bool,
    metadata: BTreeMap<String, String>,
    #[fingerprint(env)]
    client_ip: String,
}

fn request() -> CreatePayment {
    CreatePayment {
        amount: Decimal::new(199_900, 2),
        currency: "EUR".into(),
        customer_id: "cus_9s6XKzkNRiz8i3".into(),
        order_id: "ord_2026_11_30_000184".into(),
        description: Some("Annual plan, seat 4 of 10".into()),
        capture: true,
        metadata: BTreeMap::from([
            ("campaign".to_owned(), "winter".to_owned()),
            ("channel".to_owned(), "web".to_owned()),
        ]),
        client_ip: "203.0.113.7".into(),
    }
}

fn bench(c: &mut Criterion) {
    let req = request();
    let canonical = req.canonical_json();
    let spec = idem::canonical::Spec::from_json_str(
        r#"{"amount":"decimal","currency":"any","customer_id":"any","order_id":"any",
            "description":"any","capture":"any","metadata":{"map":"any"},"client_ip":"env"}"#,
    )
    .expect("valid spec");
    let value = serde_json::to_value(&req).expect("serializable");
    let body = serde_json::to_vec(&req).expect("serializable");
    assert_eq!(
        idem::canonical::canonicalize(&value, &spec).expect("canonical"),
        canonical,
        "the run-time path must produce the derive's bytes"
    );

    let mut g = c.benchmark_group("fingerprint");
    g.bench_function("sha256_precomputed", |b| {
        b.iter(|| Sha256::digest(black_box(canonical.as_bytes())))
    });
    g.bench_function("derive", |b| b.iter(|| black_box(&req).fingerprint()));
    g.bench_function("runtime_value", |b| {
        b.iter(|| idem::canonical::fingerprint(black_box(&value), &spec).expect("canonical"))
    });
    g.bench_function("serde_to_vec_sha256", |b| {
        b.iter(|| Sha256::digest(serde_json::to_vec(black_box(&req)).expect("serializable")))
    });
    g.bench_function("runtime_slice", |b| {
        b.iter(|| idem::canonical::fingerprint_slice(black_box(&body), &spec).expect("canonical"))
    });
    g.finish();

    // The canonical text alone, without SHA-256 (which costs the same on every path).
    let mut g = c.benchmark_group("canonical_text");
    g.bench_function("copy_precomputed", |b| {
        b.iter(|| black_box(canonical.as_bytes()).to_vec())
    });
    g.bench_function("derive", |b| b.iter(|| black_box(&req).canonical_json()));
    g.bench_function("runtime_value", |b| {
        b.iter(|| idem::canonical::canonicalize(black_box(&value), &spec).expect("canonical"))
    });
    g.bench_function("runtime_slice", |b| {
        b.iter(|| idem::canonical::canonicalize_slice(black_box(&body), &spec).expect("canonical"))
    });
    g.bench_function("serde_to_vec", |b| {
        b.iter(|| serde_json::to_vec(black_box(&req)).expect("serializable"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
