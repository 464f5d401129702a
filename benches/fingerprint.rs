//! Fingerprint speed: the derive against its floor and against the alternatives.
//!
//! Run: `cargo bench --bench fingerprint` then `scripts/bench-ratios fingerprint` and
//! `scripts/bench-ratios canonical_text copy_precomputed`
//! (ratios against `sha256_precomputed`, all measured in the same run; see BENCHMARKS.md).
// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use idem::Fingerprint;
use sha2::{Digest, Sha256};

#[path = "common/payment.rs"]
mod payment;
use payment::{request, spec};

fn bench(c: &mut Criterion) {
    let req = request();
    let canonical = req.canonical_json();
    let spec = spec();
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
