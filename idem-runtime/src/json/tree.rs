//! The internal JSON tree both entry points canonicalize: built by the strict parser
//! ([`super::parse`]) from raw bytes, or borrowed from a `serde_json::Value`. One tree, so the spec
//! rules ([`super::apply`]) exist once.

use std::borrow::Cow;

use serde_json::Value;

use crate::encode::{CanonicalError, Path};

/// A JSON value. Object members are sorted by the UTF-8 bytes of their names, names unique.
#[derive(Debug)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Number(Num<'a>),
    Str(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

/// A number, kept exact: the text of a raw body, or a `serde_json::Number`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num<'a> {
    Text(&'a str),
    Json(&'a serde_json::Number),
}

impl Node<'_> {
    /// The JSON type, as error messages name it.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Number(_) => "a number",
            Node::Str(_) => "a string",
            Node::Array(_) => "an array",
            Node::Object(_) => "an object",
        }
    }
}

/// Borrows `value` as a tree. Fails only if it nests deeper than `max_depth`.
pub(crate) fn from_value<'a>(
    value: &'a Value,
    max_depth: usize,
) -> Result<Node<'a>, CanonicalError> {
    convert(value, &Path::Root, 0, max_depth)
}

fn convert<'a>(
    value: &'a Value,
    path: &Path<'_>,
    depth: usize,
    max_depth: usize,
) -> Result<Node<'a>, CanonicalError> {
    let nested = |depth: usize| {
        if depth >= max_depth {
            Err(CanonicalError::TooDeep {
                path: path.render(),
                max_depth,
            })
        } else {
            Ok(depth + 1)
        }
    };
    Ok(match value {
        Value::Null => Node::Null,
        Value::Bool(b) => Node::Bool(*b),
        Value::Number(n) => Node::Number(Num::Json(n)),
        Value::String(s) => Node::Str(Cow::Borrowed(s)),
        Value::Array(items) => {
            let depth = nested(depth)?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(convert(item, &Path::Index(path, i), depth, max_depth)?);
            }
            Node::Array(out)
        }
        Value::Object(map) => {
            let depth = nested(depth)?;
            let mut out = Vec::with_capacity(map.len());
            for (name, item) in map {
                let child = convert(item, &Path::Member(path, name), depth, max_depth)?;
                out.push((Cow::Borrowed(name.as_str()), child));
            }
            // serde_json's default map iterates in byte order; with `preserve_order` it does not.
            if !out.is_sorted_by(|a, b| a.0.as_bytes() < b.0.as_bytes()) {
                out.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            }
            Node::Object(out)
        }
    })
}
