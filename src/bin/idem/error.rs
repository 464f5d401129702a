//! The error every command returns, and the line `idem` prints of it; the line of a usage
//! error.
//!
//! The rule: an error is one line on standard error, its message and its causes
//! ([`Chain`]), whatever line breaks a driver's message holds, and exit code 1; a usage error
//! too (clap's own is several lines and exit code 2).

use idem::store::Chain;

/// An error of a command: its message is what the operator reads.
pub(crate) type Error = Box<dyn std::error::Error>;

/// `e` and its causes on one line.
pub(crate) fn one_line(e: &Error) -> String {
    Chain(e.as_ref()).to_string().replace('\n', " ")
}

/// `e`, or when its cause is that idem's table does not exist (a database never migrated, or
/// not the service's), that and what to do.
pub(crate) fn unmigrated(e: Error) -> Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(c) = cause {
        if let Some(sqlx::Error::Database(db)) = c.downcast_ref::<sqlx::Error>() {
            // SQLite's words, PostgreSQL's undefined_table, MySQL's ER_NO_SUCH_TABLE.
            let code = db.code();
            if db.message().starts_with("no such table")
                || matches!(code.as_deref(), Some("42P01" | "42S02"))
            {
                return format!(
                    "idem's table is not in this database ({}): run `idem migrate` first, or \
                     check that the URL names the service's database",
                    db.message().replace('\n', " ")
                )
                .into();
            }
        }
        cause = c.source();
    }
    e
}

/// A usage error of clap on one line: its message, its tips (a similar subcommand, `--`
/// before a value), and where the usage is.
pub(crate) fn usage_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut line = lines
        .next()
        .unwrap_or("error: invalid command line")
        .to_owned();
    let mut help = "idem --help".to_owned();
    for l in lines {
        if let Some(tip) = l.strip_prefix("tip:") {
            line.push_str(&format!("; {}", tip.trim()));
        } else if let Some(usage) = l.strip_prefix("Usage:") {
            let path: Vec<&str> = usage
                .split_whitespace()
                .take_while(|w| !w.starts_with(['[', '<', '-']))
                .collect();
            help = format!("{} --help", path.join(" "));
        }
    }
    format!("{line} (see `{help}`)")
}
