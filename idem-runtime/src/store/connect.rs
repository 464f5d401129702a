//! Why a store could not connect, in the words an operator acts on ([`ConnectCause`]), and the
//! one line that says so at start-up ([`Unreachable`]), the URL's password masked
//! ([`masked_url`]).
//!
//! The rule: the cause is found in the error's chain of sources (the driver's error, its I/O
//! error), never guessed from the URL; what no rule recognizes is the deepest cause's own
//! message.

use core::fmt;
use std::error::Error;
use std::io;

/// What stopped a connection, found in an error's causes by [`ConnectCause::of`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectCause {
    /// Nothing listens at the host and port.
    Refused,
    /// The host name does not resolve.
    UnknownHost,
    /// No answer in time: a host that drops packets, a firewall, a wrong port.
    TimedOut,
    /// The server refused the user or the password.
    Authentication,
    /// The server has no database of that name.
    UnknownDatabase,
    /// A SQLite file that cannot be opened (a missing directory, no permission).
    CannotOpen,
    /// Anything else: the deepest cause's message, on one line.
    Other(String),
}

impl ConnectCause {
    /// The cause of `error`: the first of its chain (the error itself, then its sources) that a
    /// rule recognizes, else the deepest one's message.
    pub fn of(error: &(dyn Error + 'static)) -> Self {
        let mut deepest = error;
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(cause) = recognize(e) {
                return cause;
            }
            deepest = e;
            next = e.source();
        }
        ConnectCause::Other(deepest.to_string().replace('\n', " "))
    }

    /// What to do about it, naming `setting` (where the URL comes from: `DATABASE_URL`, say).
    pub fn hint(&self, setting: &str) -> String {
        match self {
            ConnectCause::Refused => format!("is the server running? check {setting}"),
            ConnectCause::UnknownHost => format!("check the host in {setting}"),
            ConnectCause::TimedOut => {
                format!("is the host reachable and the port right? check {setting}")
            }
            ConnectCause::Authentication => {
                format!("check the user and password in {setting}")
            }
            ConnectCause::UnknownDatabase => {
                format!("create it, or check the database name in {setting}")
            }
            ConnectCause::CannotOpen => {
                format!("does its directory exist, and may this user write there? check {setting}")
            }
            ConnectCause::Other(_) => format!("check {setting}"),
        }
    }
}

impl fmt::Display for ConnectCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectCause::Refused => "connection refused",
            ConnectCause::UnknownHost => "unknown host",
            ConnectCause::TimedOut => "timed out",
            ConnectCause::Authentication => "authentication failed",
            ConnectCause::UnknownDatabase => "unknown database",
            ConnectCause::CannotOpen => "cannot open the file",
            ConnectCause::Other(message) => message,
        })
    }
}

/// The cause `e` itself says, if a rule knows it.
fn recognize(e: &(dyn Error + 'static)) -> Option<ConnectCause> {
    if let Some(io) = e.downcast_ref::<io::Error>() {
        return of_io(io);
    }
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    if let Some(e) = e.downcast_ref::<sqlx::Error>() {
        return match e {
            sqlx::Error::Io(io) => of_io(io),
            sqlx::Error::PoolTimedOut => Some(ConnectCause::TimedOut),
            sqlx::Error::Database(db) => match db.code().as_deref() {
                // PostgreSQL's invalid_password and invalid_authorization_specification;
                // MySQL's access denied (1045) has the latter's SQLSTATE.
                Some("28P01" | "28000") => Some(ConnectCause::Authentication),
                // PostgreSQL's invalid_catalog_name; MySQL's 1049 says it in words.
                Some("3D000") => Some(ConnectCause::UnknownDatabase),
                _ if db.message().starts_with("Unknown database") => {
                    Some(ConnectCause::UnknownDatabase)
                }
                // SQLITE_CANTOPEN.
                Some("14") => Some(ConnectCause::CannotOpen),
                _ => None,
            },
            _ => None,
        };
    }
    #[cfg(feature = "redis")]
    if let Some(e) = e.downcast_ref::<redis::RedisError>() {
        if e.is_connection_refusal() {
            return Some(ConnectCause::Refused);
        }
        if e.is_timeout() {
            return Some(ConnectCause::TimedOut);
        }
    }
    None
}

fn of_io(e: &io::Error) -> Option<ConnectCause> {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => return Some(ConnectCause::Refused),
        io::ErrorKind::TimedOut => return Some(ConnectCause::TimedOut),
        _ => {}
    }
    // The resolver's failures have no kind of their own: glibc's, musl's and macOS's words.
    let text = e.to_string();
    [
        "failed to lookup address",
        "Name or service not known",
        "name resolution",
        "nodename nor servname",
        "No such host",
    ]
    .iter()
    .any(|w| text.contains(w))
    .then_some(ConnectCause::UnknownHost)
}

/// The line a program prints when its store cannot connect at start-up: `cannot reach the
/// database at URL: CAUSE (HINT)` (`cannot open` a SQLite file), the URL's password masked.
///
/// ```
/// use idem_runtime::store::{StoreError, Unreachable};
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let e = StoreError::unavailable(refused);
/// let line = Unreachable { url: "postgres://app:pw@127.0.0.1:1/x", error: &e, setting: "DATABASE_URL" };
/// assert_eq!(
///     line.to_string(),
///     "cannot reach the database at postgres://app:***@127.0.0.1:1/x: connection refused \
///      (is the server running? check DATABASE_URL)"
/// );
/// ```
pub struct Unreachable<'a> {
    /// The URL the program connected to.
    pub url: &'a str,
    /// What the connection failed with.
    pub error: &'a (dyn Error + 'static),
    /// Where the URL comes from, for the hint: `DATABASE_URL`, `--database-url`.
    pub setting: &'a str,
}

impl fmt::Display for Unreachable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cause = ConnectCause::of(self.error);
        // A SQLite file is opened, not reached.
        let verb = if self.url.contains("://") && !self.url.starts_with("sqlite:") {
            "reach"
        } else {
            "open"
        };
        write!(
            f,
            "cannot {verb} the database at {}: {cause} ({})",
            masked_url(self.url),
            cause.hint(self.setting)
        )
    }
}

/// `url` with its password, if any, replaced by `***`: for messages and logs.
///
/// ```
/// use idem_runtime::store::masked_url;
/// assert_eq!(masked_url("mysql://app:secret@db/app"), "mysql://app:***@db/app");
/// assert_eq!(masked_url("payments.db"), "payments.db");
/// ```
pub fn masked_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn the_cause_is_found_under_the_store_error() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let e = StoreError::unavailable(refused);
        assert_eq!(ConnectCause::of(&e), ConnectCause::Refused);
        let dns =
            io::Error::other("failed to lookup address information: Name or service not known");
        assert_eq!(
            ConnectCause::of(&StoreError::unavailable(dns)),
            ConnectCause::UnknownHost
        );
        let odd = StoreError::Other("the server said\nno".into());
        assert_eq!(
            ConnectCause::of(&odd),
            ConnectCause::Other("the server said no".to_owned())
        );
    }

    #[test]
    fn a_password_is_masked() {
        assert_eq!(
            masked_url("postgres://idem:secret@127.0.0.1:1/idem"),
            "postgres://idem:***@127.0.0.1:1/idem"
        );
        assert_eq!(
            masked_url("postgres://idem@host/db"),
            "postgres://idem@host/db"
        );
    }
}
