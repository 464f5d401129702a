//! The rules every client key obeys, whoever sends it: [`validate_key`], [`InvalidKey`].

/// Longest client key accepted, in characters (Stripe's limit).
pub const MAX_CLIENT_KEY_CHARS: usize = 255;

/// Why a client key was refused (`400`, problem type `invalid-key`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidKey {
    /// Empty (also `""`).
    #[error("the idempotency key is empty: send 1 to 255 characters, e.g. a UUID")]
    Empty,
    /// More than 255 characters.
    #[error(
        "the idempotency key has {chars} characters, at most 255 are accepted: send a shorter key, e.g. a UUID"
    )]
    TooLong {
        /// Its length in characters (after removing the quotes of an sf-string).
        chars: usize,
    },
    /// A control character.
    #[error(
        "the idempotency key contains the control character U+{code:04X} at position {index}: send printable characters only"
    )]
    ControlCharacter {
        /// The offending code point.
        code: u32,
        /// Its position (in the header value for a header key, in characters otherwise).
        index: usize,
    },
    /// The header value starts with `"` but is not an RFC 8941 sf-string.
    #[error(
        "the `Idempotency-Key` value is not a valid structured-field string (RFC 8941): {reason} at byte {index}; send `\"<key>\"` with only printable ASCII inside and `\\\"`, `\\\\` as the only escapes, or send the key bare"
    )]
    MalformedString {
        /// What is wrong.
        reason: &'static str,
        /// Byte offset in the header value.
        index: usize,
    },
    /// The key header appears more than once.
    #[error(
        "the `Idempotency-Key` header appears more than once: send exactly one key per request"
    )]
    Repeated,
    /// A bare key with a character outside visible ASCII, or with `"` / `\` / whitespace.
    /// The message names the character's class, never the character: a key may be a secret.
    #[error(
        "the bare `Idempotency-Key` value has {} at byte {index}: a bare key is visible ASCII without spaces, `\"` or `\\`; quote it as an sf-string (`\"...\"`) or send e.g. a UUID",
        char_class(*found)
    )]
    NotAToken {
        /// The offending character (`U+FFFD` for a byte that is not UTF-8).
        found: char,
        /// Byte offset in the header value.
        index: usize,
    },
}

/// What a refused character of a bare key is, for messages: its class, not itself.
fn char_class(c: char) -> &'static str {
    match c {
        ' ' => "a space",
        '"' => "a double quote",
        '\\' => "a backslash",
        c if c.is_ascii_control() => "a control character",
        c if !c.is_ascii() => "a byte outside ASCII",
        _ => "a character outside a bare key's",
    }
}

/// Validates a client key taken from the request itself (`key = msg.id`, `KeySource::Value`),
/// not from a header: 1 to 255 characters, no control characters; any other character is
/// accepted as it is (no unquoting).
///
/// # Errors
/// [`InvalidKey::Empty`], [`InvalidKey::TooLong`] or [`InvalidKey::ControlCharacter`].
///
/// ```
/// use idem_runtime::key::{InvalidKey, validate_key};
/// assert!(validate_key("order-7 / ünïcode").is_ok());
/// assert_eq!(validate_key(""), Err(InvalidKey::Empty));
/// assert!(matches!(validate_key("a\nb"), Err(InvalidKey::ControlCharacter { code: 10, index: 1 })));
/// ```
pub fn validate_key(key: &str) -> Result<(), InvalidKey> {
    // Keys are ASCII nearly always: a byte is then a character, and its control characters are
    // those of ASCII. Checked on every request, once for the header and once when scoped.
    if key.is_ascii() {
        if let Some(index) = key.bytes().position(|b| b.is_ascii_control()) {
            return Err(InvalidKey::ControlCharacter {
                code: u32::from(key.as_bytes()[index]),
                index,
            });
        }
        return check_length(key);
    }
    if let Some((index, c)) = key.chars().enumerate().find(|(_, c)| c.is_control()) {
        return Err(InvalidKey::ControlCharacter {
            code: u32::from(c),
            index,
        });
    }
    check_length(key)
}

pub(super) fn check_length(key: &str) -> Result<(), InvalidKey> {
    if key.is_empty() {
        return Err(InvalidKey::Empty);
    }
    let chars = if key.is_ascii() {
        key.len()
    } else {
        key.chars().count()
    };
    if chars > MAX_CLIENT_KEY_CHARS {
        return Err(InvalidKey::TooLong { chars });
    }
    Ok(())
}
