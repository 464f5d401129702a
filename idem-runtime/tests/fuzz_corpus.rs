//! The fuzz targets' properties (`fuzz/src/lib.rs`, compiled here as a module) over every input
//! committed under `fuzz/`: the hand-written seeds, the minimized corpus and the inputs of past
//! findings. This runs them on stable in the normal test suite, without `cargo fuzz`; the fuzzing
//! itself is `scripts/fuzz` (`docs/reliability.md`, "Fuzzing").
#![cfg(feature = "fuzzing")]

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/lib.rs"]
mod targets;

/// The files under `fuzz/{seeds,corpus,regressions}/<target>/`.
fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for dir in ["seeds", "corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(
        !files.is_empty(),
        "no input for `{target}` under {}",
        fuzz.display()
    );
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    for path in inputs(target) {
        let data = std::fs::read(&path).expect("readable");
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            eprintln!("{target}: {} failed", path.display());
            std::panic::resume_unwind(panic);
        }
    }
}

#[test]
fn canonical_slice() {
    replay("canonical_slice", targets::canonical_slice);
}

#[test]
fn canonical_differential() {
    replay("canonical_differential", targets::canonical_differential);
}

#[test]
fn header_key() {
    replay("header_key", targets::header_key);
}

#[test]
fn header_blob() {
    replay("header_blob", targets::header_blob);
}

#[test]
fn spec_json() {
    replay("spec_json", targets::spec_json);
}
