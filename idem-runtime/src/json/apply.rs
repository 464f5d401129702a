//! The spec rules, applied to a [`Node`] tree: the one implementation behind both
//! [`super::canonicalize`] (a `serde_json::Value`) and [`super::canonicalize_slice`] (raw bytes).

use super::spec::Member;
use super::spec::{Spec, ValueSpec, VariantSpec};
use super::tree::{Node, Num};
use crate::encode::{
    CanonicalError, CanonicalWriter, Path, datetime, number, scalar, text, truncate,
};

type Result<T = ()> = core::result::Result<T, CanonicalError>;

/// Options of one run.
pub(crate) struct Rules {
    pub deny_unknown_fields: bool,
}

impl Rules {
    /// Appends the canonical text of the top-level object `root` under `spec`.
    pub(crate) fn root(&self, root: &Node<'_>, spec: &Spec, out: &mut Vec<u8>) -> Result {
        match root {
            Node::Object(members) => self.object(members, spec, &Path::Root, out),
            other => Err(unexpected(&Path::Root, "an object at the top level", other)),
        }
    }

    fn value(
        &self,
        node: &Node<'_>,
        spec: &ValueSpec,
        path: &Path<'_>,
        out: &mut Vec<u8>,
    ) -> Result {
        if let Node::Null = node {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        match spec {
            ValueSpec::Any => self.any(node, path, out),
            ValueSpec::Decimal => match node {
                Node::Number(n) => write_number(*n, path, out),
                Node::Str(s) => number::write_number_text(out, s).map_err(|e| e.at(path)),
                other => Err(unexpected(
                    path,
                    "a number or a decimal string like `\"100.00\"`",
                    other,
                )),
            },
            ValueSpec::Base64 => base64(node, path, out),
            ValueSpec::Timestamp => match node {
                Node::Str(s) => {
                    let ts = datetime::parse_timestamp(s).map_err(|reason| {
                        CanonicalError::InvalidTimestamp {
                            path: path.render(),
                            text: truncate(s),
                            reason,
                        }
                    })?;
                    ts.write(out);
                    Ok(())
                }
                other => Err(unexpected(path, "an RFC 3339 timestamp string", other)),
            },
            ValueSpec::Date => match node {
                Node::Str(s) => {
                    let (y, m, d) =
                        datetime::parse_date(s).map_err(|reason| CanonicalError::InvalidDate {
                            path: path.render(),
                            text: truncate(s),
                            reason,
                        })?;
                    datetime::write_date(out, y, m, d);
                    Ok(())
                }
                other => Err(unexpected(path, "a date string `YYYY-MM-DD`", other)),
            },
            ValueSpec::Uuid => match node {
                Node::Str(s) => {
                    let bytes =
                        scalar::parse_uuid(s).ok_or_else(|| CanonicalError::InvalidUuid {
                            path: path.render(),
                            text: truncate(s),
                        })?;
                    scalar::write_uuid(out, &bytes);
                    Ok(())
                }
                other => Err(unexpected(path, "a UUID string", other)),
            },
            ValueSpec::Array(inner) => match node {
                Node::Array(items) => self.array(items, inner, path, out),
                other => Err(unexpected(path, "an array", other)),
            },
            ValueSpec::Tuple(elements) => match node {
                Node::Array(items) if items.len() == elements.len() => {
                    out.push(b'[');
                    for (i, (item, spec)) in items.iter().zip(elements).enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        self.value(item, spec, &Path::Index(path, i), out)?;
                    }
                    out.push(b']');
                    Ok(())
                }
                Node::Array(items) => Err(CanonicalError::TupleLength {
                    path: path.render(),
                    expected: elements.len(),
                    found: items.len(),
                }),
                other => Err(unexpected(path, "an array (a tuple)", other)),
            },
            ValueSpec::Set(inner) => match node {
                Node::Array(items) => self.set(items, inner, path, out),
                other => Err(unexpected(path, "an array (a set)", other)),
            },
            ValueSpec::Map(inner) => match node {
                Node::Object(members) => self.map(members, inner, path, out),
                other => Err(unexpected(path, "an object (a map)", other)),
            },
            ValueSpec::Object(spec) => match node {
                Node::Object(members) => self.object(members, spec, path, out),
                other => Err(unexpected(path, "an object", other)),
            },
            ValueSpec::Enum(variants) => self.enumeration(node, variants, path, out),
        }
    }

    /// The general rules: every member kept (nulls omitted), numbers exact.
    fn any(&self, node: &Node<'_>, path: &Path<'_>, out: &mut Vec<u8>) -> Result {
        match node {
            Node::Null => out.extend_from_slice(b"null"),
            Node::Bool(b) => CanonicalWriter::new(out).bool(*b),
            Node::Number(n) => write_number(*n, path, out)?,
            Node::Str(s) => text::write_escaped_str(out, s),
            Node::Array(items) => self.array(items, &ValueSpec::Any, path, out)?,
            Node::Object(members) => self.map(members, &ValueSpec::Any, path, out)?,
        }
        Ok(())
    }

    fn array(
        &self,
        items: &[Node<'_>],
        inner: &ValueSpec,
        path: &Path<'_>,
        out: &mut Vec<u8>,
    ) -> Result {
        out.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            self.value(item, inner, &Path::Index(path, i), out)?;
        }
        out.push(b']');
        Ok(())
    }

    fn set(
        &self,
        items: &[Node<'_>],
        inner: &ValueSpec,
        path: &Path<'_>,
        out: &mut Vec<u8>,
    ) -> Result {
        let mut rendered = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let mut buf = Vec::new();
            self.value(item, inner, &Path::Index(path, i), &mut buf)?;
            rendered.push(buf);
        }
        rendered.sort_unstable();
        rendered.dedup();
        out.push(b'[');
        for (i, item) in rendered.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item);
        }
        out.push(b']');
        Ok(())
    }

    /// Members are already sorted by name (see [`Node::Object`]).
    fn map(
        &self,
        members: &[(std::borrow::Cow<'_, str>, Node<'_>)],
        inner: &ValueSpec,
        path: &Path<'_>,
        out: &mut Vec<u8>,
    ) -> Result {
        let mut w = Members::open(out);
        for (name, value) in members {
            if let Node::Null = value {
                continue;
            }
            w.name(out, name);
            self.value(value, inner, &Path::Member(path, name), out)?;
        }
        out.push(b'}');
        Ok(())
    }

    fn object(
        &self,
        members: &[(std::borrow::Cow<'_, str>, Node<'_>)],
        spec: &Spec,
        path: &Path<'_>,
        out: &mut Vec<u8>,
    ) -> Result {
        if spec.reshapes() {
            return self.reshaped_object(members, spec, path, out);
        }
        let mut w = Members::open(out);
        for (name, value) in members {
            match spec.member(name) {
                Member::Field(_, field) => {
                    if let Node::Null = value {
                        continue;
                    }
                    w.name(out, name);
                    self.value(value, field, &Path::Member(path, name), out)?;
                }
                Member::Env => {}
                Member::Unknown if self.deny_unknown_fields => {
                    return Err(CanonicalError::UnknownField {
                        path: path.render(),
                        name: truncate(name),
                    });
                }
                Member::Unknown => {}
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// An object whose spec renames members (aliases) or adds absent ones (defaults): its
    /// members are collected under their field names, the defaults of absent fields added, and
    /// the whole sorted by name before it is written.
    fn reshaped_object(
        &self,
        members: &[(std::borrow::Cow<'_, str>, Node<'_>)],
        spec: &Spec,
        path: &Path<'_>,
        out: &mut Vec<u8>,
    ) -> Result {
        let mut fields: Vec<Reshaped<'_, '_>> = Vec::new();
        for (name, value) in members {
            match spec.member(name) {
                Member::Field(field, value_spec) => {
                    if fields.iter().any(|(f, ..)| *f == field) {
                        return Err(CanonicalError::DuplicateMember {
                            path: path.render(),
                            name: truncate(field),
                        });
                    }
                    fields.push((field, name, Some((value, value_spec))));
                }
                Member::Env => {}
                Member::Unknown if self.deny_unknown_fields => {
                    return Err(CanonicalError::UnknownField {
                        path: path.render(),
                        name: truncate(name),
                    });
                }
                Member::Unknown => {}
            }
        }
        for (field, text) in &spec.defaults {
            if !fields.iter().any(|(f, ..)| f == field) {
                fields.push((field, text, None));
            }
        }
        fields.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut w = Members::open(out);
        for (field, name_or_text, value) in fields {
            match value {
                Some((Node::Null, _)) => {}
                Some((value, value_spec)) if spec.omit_empty.iter().any(|f| f == field) => {
                    let mut text = Vec::new();
                    self.value(
                        value,
                        value_spec,
                        &Path::Member(path, name_or_text),
                        &mut text,
                    )?;
                    if !matches!(&text[..], b"[]" | b"{}" | b"\"\"") {
                        w.name(out, field);
                        out.extend_from_slice(&text);
                    }
                }
                Some((value, value_spec)) => {
                    w.name(out, field);
                    self.value(value, value_spec, &Path::Member(path, name_or_text), out)?;
                }
                // A default: its canonical text, written by the derive.
                None => {
                    w.name(out, field);
                    out.extend_from_slice(name_or_text.as_bytes());
                }
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// Externally tagged: `"Unit"`, `{"Unit": null}` (both written `"Unit"`) or
    /// `{"Variant": payload}` (written with the tag even when the payload is null: the tag is
    /// the value, not a member that may be omitted).
    fn enumeration(
        &self,
        node: &Node<'_>,
        variants: &[VariantSpec],
        path: &Path<'_>,
        out: &mut Vec<u8>,
    ) -> Result {
        let find = |name: &str| {
            variants.iter().find(|v| v.name == name).ok_or_else(|| {
                let expected = variants
                    .iter()
                    .map(|v| format!("`{}`", v.name))
                    .collect::<Vec<_>>()
                    .join(", ");
                CanonicalError::UnknownVariant {
                    path: path.render(),
                    name: truncate(name),
                    expected: if expected.is_empty() {
                        "(none: the spec lists no variants)".to_owned()
                    } else {
                        expected
                    },
                }
            })
        };
        let invalid = |name: &str, reason| CanonicalError::InvalidVariant {
            path: path.render(),
            name: truncate(name),
            reason,
        };
        match node {
            Node::Str(name) => match find(name)?.payload {
                None => {
                    text::write_escaped_str(out, name);
                    Ok(())
                }
                Some(_) => Err(invalid(
                    name,
                    "has a payload: send it as `{\"Variant\": payload}`",
                )),
            },
            Node::Object(members) if members.len() == 1 => {
                let (name, payload) = &members[0];
                match (&find(name)?.payload, payload) {
                    (None, Node::Null) => {
                        text::write_escaped_str(out, name);
                        Ok(())
                    }
                    (None, _) => Err(invalid(
                        name,
                        "is a unit variant: send it as the string `\"Variant\"`",
                    )),
                    (Some(spec), payload) => {
                        out.push(b'{');
                        text::write_escaped_str(out, name);
                        out.push(b':');
                        self.value(payload, spec, &Path::Member(path, name), out)?;
                        out.push(b'}');
                        Ok(())
                    }
                }
            }
            other => Err(unexpected(
                path,
                "an enum: a variant name string or an object with exactly one member",
                other,
            )),
        }
    }
}

/// Writes `{` then `,` separators and quoted names.
/// A member of a reshaped object: its field's name, and the input member's name with its value
/// and spec, or (for a default) the default's canonical text and `None`.
type Reshaped<'s, 'n> = (&'s str, &'s str, Option<(&'s Node<'n>, &'s ValueSpec)>);

struct Members {
    first: bool,
}

impl Members {
    fn open(out: &mut Vec<u8>) -> Self {
        out.push(b'{');
        Members { first: true }
    }

    fn name(&mut self, out: &mut Vec<u8>, name: &str) {
        if !core::mem::take(&mut self.first) {
            out.push(b',');
        }
        text::write_escaped_str(out, name);
        out.push(b':');
    }
}

fn unexpected(path: &Path<'_>, expected: &'static str, found: &Node<'_>) -> CanonicalError {
    CanonicalError::UnexpectedType {
        path: path.render(),
        expected,
        found: found.type_name(),
    }
}

fn write_number(n: Num<'_>, path: &Path<'_>, out: &mut Vec<u8>) -> Result {
    match n {
        Num::Text(text) => number::write_number_text(out, text),
        Num::Json(n) => number::write_json_number(out, n),
    }
    .map_err(|e| e.at(path))
}

/// Bytes: a base64 string, or serde's array of integers 0..=255.
fn base64(node: &Node<'_>, path: &Path<'_>, out: &mut Vec<u8>) -> Result {
    let invalid = |path: &Path<'_>, reason| CanonicalError::InvalidBase64 {
        path: path.render(),
        reason,
    };
    let bytes = match node {
        Node::Str(s) => scalar::decode_base64(s).map_err(|reason| invalid(path, reason))?,
        Node::Array(items) => {
            let mut bytes = Vec::with_capacity(items.len());
            let mut scratch = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let at = Path::Index(path, i);
                let byte = match item {
                    Node::Number(n) => {
                        scratch.clear();
                        write_number(*n, &at, &mut scratch)?;
                        core::str::from_utf8(&scratch)
                            .ok()
                            .and_then(|t| t.parse::<u8>().ok())
                    }
                    _ => None,
                };
                bytes.push(
                    byte.ok_or_else(|| invalid(&at, "a byte array holds integers 0..=255 only"))?,
                );
            }
            bytes
        }
        other => {
            return Err(unexpected(
                path,
                "bytes: a base64 string or an array of integers 0..=255",
                other,
            ));
        }
    };
    CanonicalWriter::new(out).base64(&bytes);
    Ok(())
}
