//! The error every command returns, and the line `idem` prints of it.
//!
//! The rule: an error is one line on standard error, its message and its causes
//! ([`Chain`]), whatever line breaks a driver's message holds.

use idem::store::Chain;

/// An error of a command: its message is what the operator reads.
pub(crate) type Error = Box<dyn std::error::Error>;

/// `e` and its causes on one line.
pub(crate) fn one_line(e: &Error) -> String {
    Chain(e.as_ref()).to_string().replace('\n', " ")
}
