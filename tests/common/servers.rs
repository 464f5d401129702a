//! The database servers the integration tests use (`scripts/test` starts them).

/// The URL of a test server, or `None` (with a note) when it is not configured. Under
/// `CI=true` a missing server is a failure, never a skip.
pub fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "{var} is not set and CI=true: run the tests through scripts/test, which starts the servers"
        ),
        _ => {
            eprintln!(
                "note: {var} is not set, skipping this test (scripts/test starts the servers)"
            );
            None
        }
    }
}

/// A name no other test (nor an earlier run against the same server) uses; letters, digits and
/// `_` only, so that it also serves as a schema or database name.
pub fn unique(label: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{label}_{}_{nanos}_{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}
