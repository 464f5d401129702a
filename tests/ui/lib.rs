//! Nothing here: the compile-fail and compile-pass cases of idem's macros are run by `ui.rs`
//! (`cargo test -p idem-ui-tests`).
