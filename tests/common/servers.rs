//! The database servers the tests use (`scripts/test` starts them): their URLs, the commands
//! that stop and start them, unique names on them. One file for the tests of `idem` and of
//! `idem-runtime` (`#[path]`).

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

/// Runs the shell command `cmd` (a server's `STOP` or `START` command); panics when it fails.
pub fn sh(cmd: &str) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .status()
        .unwrap();
    assert!(status.success(), "`{cmd}` failed");
}

/// Holds a server's `START` command while the server is stopped, and runs it when dropped with
/// one: a test that fails half-way leaves the server running for the tests after it.
pub struct Restart(pub Option<String>);

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(cmd) = self.0.take() {
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(&cmd)
                .status();
        }
    }
}
