//! [`CanonicalError`] and the JSON paths (`$.items[2].amount`) its variants carry.

use core::fmt;

/// A value that has no canonical form under its spec, or a body that is not valid JSON.
///
/// Every variant names the JSON path of the offending value (`$.items[2].amount`; empty when the
/// error comes from a [`CanonicalWriter`](crate::CanonicalWriter) outside the run-time
/// canonicalizer) and its message says what to send instead. [`CanonicalError::kind`] gives a
/// stable identifier, the one used by the `"invalid"` cases of the test vectors.
///
/// ```
/// use idem_runtime::json::{Spec, ValueSpec, canonicalize_slice};
/// let spec = Spec::new().field("items", ValueSpec::array(ValueSpec::object(
///     Spec::new().field("amount", ValueSpec::Decimal),
/// )));
/// let err = canonicalize_slice(br#"{"items":[{"amount":"1O0"}]}"#, &spec).unwrap_err();
/// assert_eq!(err.kind(), "invalid_number");
/// assert_eq!(err.path(), Some("$.items[0].amount"));
/// assert!(err.to_string().starts_with("at `$.items[0].amount`: `1O0` is not a decimal number"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonicalError {
    /// Not a decimal number.
    #[error(
        "{}`{text}` is not a decimal number: write digits with an optional `.` and exponent, e.g. `100.00`",
        At(.path)
    )]
    InvalidNumber {
        /// Where (empty if unknown).
        path: String,
        /// The offending text (shortened).
        text: String,
    },
    /// A number whose exact plain form would be absurdly long.
    #[error(
        "{}number `{text}` is out of range: its exact decimal form would need more than 1100 zeros; send a smaller number or a string",
        At(.path)
    )]
    NumberOutOfRange {
        /// Where (empty if unknown).
        path: String,
        /// The offending text (shortened).
        text: String,
    },
    /// The body is not strict JSON (RFC 8259).
    #[error(
        "{}invalid JSON at line {line}, column {column}: {message}; send strict JSON (RFC 8259)",
        At(.path)
    )]
    InvalidJson {
        /// The innermost container around the error (`$` at top level).
        path: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in bytes) of the error.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// An object member name that appears twice: parsers disagree on which one counts.
    #[error(
        "{}member `{name}` appears twice: JSON parsers disagree on which one counts, so send each member once",
        At(.path)
    )]
    DuplicateMember {
        /// The object holding the duplicate.
        path: String,
        /// The repeated name (shortened).
        name: String,
    },
    /// Arrays and objects nested deeper than the limit.
    #[error(
        "{}arrays and objects are nested deeper than {max_depth} levels: flatten the request or raise `Canonicalizer::max_depth`",
        At(.path)
    )]
    TooDeep {
        /// The first container beyond the limit.
        path: String,
        /// The limit in force.
        max_depth: usize,
    },
    /// A JSON value of the wrong type for its spec.
    #[error("{}expected {expected}, found {found}", At(.path))]
    UnexpectedType {
        /// Where.
        path: String,
        /// What the spec accepts, e.g. "a number or a decimal string like `\"100.00\"`".
        expected: &'static str,
        /// The JSON type found: "an object", "an array", "a string", "a number", "a boolean".
        found: &'static str,
    },
    /// A [`ValueSpec::Tuple`](crate::json::ValueSpec::Tuple) array with the wrong number of elements.
    #[error(
        "{}expected an array of {expected} elements (a tuple), found {found} elements",
        At(.path)
    )]
    TupleLength {
        /// Where.
        path: String,
        /// The number of element specs.
        expected: usize,
        /// The number of elements found.
        found: usize,
    },
    /// A [`ValueSpec::Base64`](crate::json::ValueSpec::Base64) value that is not bytes.
    #[error("{}invalid bytes: {reason}", At(.path))]
    InvalidBase64 {
        /// Where.
        path: String,
        /// What is wrong and what to send.
        reason: &'static str,
    },
    /// A [`ValueSpec::Timestamp`](crate::json::ValueSpec::Timestamp) string that is not RFC 3339.
    #[error(
        "{}`{text}` is not an RFC 3339 timestamp ({reason}): send e.g. `2024-01-02T03:04:05.12+01:00`",
        At(.path)
    )]
    InvalidTimestamp {
        /// Where.
        path: String,
        /// The offending text (shortened).
        text: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A [`ValueSpec::Date`](crate::json::ValueSpec::Date) string that is not `YYYY-MM-DD`.
    #[error("{}`{text}` is not a date ({reason}): send `YYYY-MM-DD`, e.g. `2024-01-02`", At(.path))]
    InvalidDate {
        /// Where.
        path: String,
        /// The offending text (shortened).
        text: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A [`ValueSpec::Uuid`](crate::json::ValueSpec::Uuid) string that is not a UUID.
    #[error(
        "{}`{text}` is not a UUID: send 32 hex digits, hyphenated 8-4-4-4-12 (e.g. `67e55044-10b1-426f-9247-bb680e5fe0c8`)",
        At(.path)
    )]
    InvalidUuid {
        /// Where.
        path: String,
        /// The offending text (shortened).
        text: String,
    },
    /// An enum value naming a variant the spec does not list.
    #[error("{}unknown variant `{name}`: expected one of {expected}", At(.path))]
    UnknownVariant {
        /// Where.
        path: String,
        /// The variant name found (shortened).
        name: String,
        /// The variants the spec lists, quoted and comma-separated.
        expected: String,
    },
    /// An enum value whose shape does not fit its variant (payload missing or unexpected).
    #[error("{}variant `{name}` {reason}", At(.path))]
    InvalidVariant {
        /// Where.
        path: String,
        /// The variant name (shortened).
        name: String,
        /// What is wrong and what to send.
        reason: &'static str,
    },
    /// A member that is neither whitelisted nor an environment field, with
    /// [`Canonicalizer::deny_unknown_fields`](crate::json::Canonicalizer::deny_unknown_fields).
    #[error(
        "{}member `{name}` is neither part of the fingerprint nor an environment field: fix its name, or add it to the spec (as a field, or as `env`)",
        At(.path)
    )]
    UnknownField {
        /// The object holding the member.
        path: String,
        /// The member's name (shortened).
        name: String,
    },
    /// A spec given as JSON that does not follow the spec format (`docs/fingerprint.md`).
    #[error("invalid fingerprint spec: {message}")]
    InvalidSpec {
        /// What is wrong.
        message: String,
    },
}

impl CanonicalError {
    /// A stable snake_case identifier of the variant: `invalid_number`, `number_out_of_range`,
    /// `invalid_json`, `duplicate_member`, `too_deep`, `unexpected_type`, `tuple_length`,
    /// `invalid_base64`,
    /// `invalid_timestamp`, `invalid_date`, `invalid_uuid`, `unknown_variant`, `invalid_variant`,
    /// `unknown_field`, `invalid_spec`.
    ///
    /// ```
    /// use idem_runtime::json::{Spec, canonicalize_slice};
    /// let err = canonicalize_slice(br#"{"a":1,"a":2}"#, &Spec::new()).unwrap_err();
    /// assert_eq!(err.kind(), "duplicate_member");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            CanonicalError::InvalidNumber { .. } => "invalid_number",
            CanonicalError::NumberOutOfRange { .. } => "number_out_of_range",
            CanonicalError::InvalidJson { .. } => "invalid_json",
            CanonicalError::DuplicateMember { .. } => "duplicate_member",
            CanonicalError::TooDeep { .. } => "too_deep",
            CanonicalError::UnexpectedType { .. } => "unexpected_type",
            CanonicalError::TupleLength { .. } => "tuple_length",
            CanonicalError::InvalidBase64 { .. } => "invalid_base64",
            CanonicalError::InvalidTimestamp { .. } => "invalid_timestamp",
            CanonicalError::InvalidDate { .. } => "invalid_date",
            CanonicalError::InvalidUuid { .. } => "invalid_uuid",
            CanonicalError::UnknownVariant { .. } => "unknown_variant",
            CanonicalError::InvalidVariant { .. } => "invalid_variant",
            CanonicalError::UnknownField { .. } => "unknown_field",
            CanonicalError::InvalidSpec { .. } => "invalid_spec",
        }
    }

    /// The JSON path of the offending value (`$.items[2].amount`), if known.
    ///
    /// ```
    /// use idem_runtime::json::{Spec, canonicalize_slice};
    /// let err = canonicalize_slice(b"[1]", &Spec::new()).unwrap_err();
    /// assert_eq!(err.path(), Some("$"));
    /// ```
    pub fn path(&self) -> Option<&str> {
        let path = match self {
            CanonicalError::InvalidNumber { path, .. }
            | CanonicalError::NumberOutOfRange { path, .. }
            | CanonicalError::InvalidJson { path, .. }
            | CanonicalError::DuplicateMember { path, .. }
            | CanonicalError::TooDeep { path, .. }
            | CanonicalError::UnexpectedType { path, .. }
            | CanonicalError::TupleLength { path, .. }
            | CanonicalError::InvalidBase64 { path, .. }
            | CanonicalError::InvalidTimestamp { path, .. }
            | CanonicalError::InvalidDate { path, .. }
            | CanonicalError::InvalidUuid { path, .. }
            | CanonicalError::UnknownVariant { path, .. }
            | CanonicalError::InvalidVariant { path, .. }
            | CanonicalError::UnknownField { path, .. } => path,
            CanonicalError::InvalidSpec { .. } => return None,
        };
        (!path.is_empty()).then_some(path.as_str())
    }

    /// Sets the path of an error raised without one (number errors from the writer).
    pub(crate) fn at(mut self, at: &Path<'_>) -> Self {
        match &mut self {
            CanonicalError::InvalidNumber { path, .. }
            | CanonicalError::NumberOutOfRange { path, .. } => *path = at.render(),
            _ => {}
        }
        self
    }
}

/// Renders `at `$.x`: ` before a message, or nothing when the path is unknown.
struct At<'a>(&'a String);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "at `{}`: ", self.0)
        }
    }
}

/// A JSON path kept on the stack while a value is walked: each level borrows its parent, so
/// nothing is allocated unless an error renders it.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    Member(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    /// `$`, `$.amount`, `$.items[2]`, `$["a b"]` (bracket form for names that are not
    /// identifiers).
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out);
        out
    }

    fn render_into(&self, out: &mut String) {
        match *self {
            Path::Root => out.push('$'),
            Path::Member(parent, name) => {
                parent.render_into(out);
                let ident = name.bytes().next().is_some_and(|b| !b.is_ascii_digit())
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if ident {
                    out.push('.');
                    out.push_str(name);
                } else {
                    let mut quoted = Vec::new();
                    super::text::write_escaped_str(&mut quoted, name);
                    out.push('[');
                    out.push_str(&String::from_utf8_lossy(&quoted));
                    out.push(']');
                }
            }
            Path::Index(parent, i) => {
                parent.render_into(out);
                out.push('[');
                out.push_str(itoa::Buffer::new().format(i));
                out.push(']');
            }
        }
    }
}

/// Shortens user text quoted in an error message to 40 characters.
pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_as_jsonpath() {
        let root = Path::Root;
        let items = Path::Member(&root, "items");
        let second = Path::Index(&items, 2);
        let amount = Path::Member(&second, "amount");
        assert_eq!(amount.render(), "$.items[2].amount");
        assert_eq!(Path::Member(&root, "a b\"").render(), r#"$["a b\""]"#);
        assert_eq!(Path::Member(&root, "2x").render(), r#"$["2x"]"#);
        assert_eq!(Path::Member(&root, "").render(), r#"$[""]"#);
        assert_eq!(Path::Member(&root, "é").render(), r#"$["é"]"#);
    }

    #[test]
    fn messages_name_the_path_when_known() {
        let e = CanonicalError::InvalidNumber {
            path: String::new(),
            text: "x".into(),
        };
        assert!(e.to_string().starts_with("`x` is not a decimal number"));
        assert_eq!(e.path(), None);
        let e = e.at(&Path::Member(&Path::Root, "amount"));
        assert!(e.to_string().starts_with("at `$.amount`: `x`"));
        assert_eq!(e.path(), Some("$.amount"));
    }
}
