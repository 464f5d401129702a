//! A strict JSON parser (RFC 8259) into the borrowed [`Node`] tree, keeping numbers as their text.
//!
//! `serde_json::Value` (without serde_json's `arbitrary_precision` feature, which idem does not
//! force on its users) holds non-integers as `f64` and would lose digits of long decimals, so raw
//! bodies are parsed here. Strict means: UTF-8 only, no byte order mark, no comments, no trailing
//! commas, no leading zeros, no `NaN`/`Infinity`, no raw control characters in strings, no lone
//! surrogates, and no duplicate member names (parsers disagree on which one counts).

use std::borrow::Cow;

use super::tree::{Node, Num};
use crate::encode::{CanonicalError, Path, truncate};

/// Parses one JSON text (surrounded by optional whitespace).
pub(crate) fn parse(json: &[u8], max_depth: usize) -> Result<Node<'_>> {
    let text = match core::str::from_utf8(json) {
        Ok(text) => text,
        Err(e) => {
            let p = Parser {
                text: "",
                bytes: json,
                pos: e.valid_up_to(),
                max_depth,
            };
            return Err(p.error(&Path::Root, "the body is not valid UTF-8"));
        }
    };
    let mut p = Parser {
        text,
        bytes: json,
        pos: 0,
        max_depth,
    };
    if text.starts_with('\u{feff}') {
        return Err(p.error(&Path::Root, "a byte order mark is not allowed"));
    }
    p.skip_ws();
    let node = p.value(&Path::Root, 0)?;
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(p.error(&Path::Root, "unexpected data after the JSON value"));
    }
    Ok(node)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    max_depth: usize,
}

type Result<T> = core::result::Result<T, CanonicalError>;

impl<'a> Parser<'a> {
    fn error(&self, path: &Path<'_>, message: &str) -> CanonicalError {
        let before = &self.bytes[..self.pos.min(self.bytes.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = before.len()
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        CanonicalError::InvalidJson {
            path: path.render(),
            line,
            column,
            message: message.to_owned(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, path: &Path<'_>, word: &str) -> Result<()> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.error(path, "expected a JSON value"))
        }
    }

    fn value(&mut self, path: &Path<'_>, depth: usize) -> Result<Node<'a>> {
        match self.peek() {
            None => Err(self.error(path, "unexpected end of input, expected a value")),
            Some(b'{') => self.object(path, self.nested(path, depth)?),
            Some(b'[') => self.array(path, self.nested(path, depth)?),
            Some(b'"') => Ok(Node::Str(self.string(path)?)),
            Some(b'-' | b'0'..=b'9') => Ok(Node::Number(Num::Text(self.number(path)?))),
            Some(b't') => self.expect_literal(path, "true").map(|()| Node::Bool(true)),
            Some(b'f') => self
                .expect_literal(path, "false")
                .map(|()| Node::Bool(false)),
            Some(b'n') => self.expect_literal(path, "null").map(|()| Node::Null),
            Some(_) => Err(self.error(path, "expected a JSON value")),
        }
    }

    fn nested(&self, path: &Path<'_>, depth: usize) -> Result<usize> {
        if depth >= self.max_depth {
            Err(CanonicalError::TooDeep {
                path: path.render(),
                max_depth: self.max_depth,
            })
        } else {
            Ok(depth + 1)
        }
    }

    fn array(&mut self, path: &Path<'_>, depth: usize) -> Result<Node<'a>> {
        self.pos += 1; // [
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Node::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(&Path::Index(path, items.len()), depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Node::Array(items));
                }
                _ => return Err(self.error(path, "expected `,` or `]` in an array")),
            }
        }
    }

    fn object(&mut self, path: &Path<'_>, depth: usize) -> Result<Node<'a>> {
        self.pos += 1; // {
        let mut members: Vec<(Cow<'a, str>, Node<'a>)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Node::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error(path, "expected a member name in double quotes"));
            }
            let name = self.string(path)?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.error(path, "expected `:` after a member name"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value(&Path::Member(path, &name), depth)?;
            members.push((name, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.error(path, "expected `,` or `}` in an object")),
            }
        }
        // Stable sort, then equal neighbours are duplicates.
        members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        if let Some(pair) = members.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(CanonicalError::DuplicateMember {
                path: path.render(),
                name: truncate(&pair[0].0),
            });
        }
        Ok(Node::Object(members))
    }

    /// A number, checked against the RFC 8259 grammar; returns its text.
    fn number(&mut self, path: &Path<'_>) -> Result<&'a str> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let from = p.pos;
            while let Some(b'0'..=b'9') = p.peek() {
                p.pos += 1;
            }
            p.pos - from
        };
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.error(path, "a number must not have leading zeros"));
                }
            }
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.error(path, "expected digits after `-`")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return Err(self.error(path, "expected digits after the decimal point"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(self.error(path, "expected digits in the exponent"));
            }
        }
        Ok(&self.text[start..self.pos])
    }

    /// A string (the opening quote at `pos`), borrowed unless it has escapes.
    fn string(&mut self, path: &Path<'_>) -> Result<Cow<'a, str>> {
        self.pos += 1; // "
        let start = self.pos;
        loop {
            match self.peek() {
                None => return Err(self.error(path, "unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Borrowed(&self.text[start..self.pos - 1]));
                }
                Some(b'\\') => break,
                Some(0x00..=0x1f) => {
                    return Err(self.error(
                        path,
                        "control characters in strings must be escaped (`\\n`, `\\u0001`)",
                    ));
                }
                Some(_) => self.pos += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            match self.peek() {
                None => return Err(self.error(path, "unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            out.push(self.unicode_escape(path)?);
                            continue;
                        }
                        _ => return Err(self.error(path, "invalid escape in a string")),
                    };
                    self.pos += 1;
                    out.push(c);
                }
                Some(0x00..=0x1f) => {
                    return Err(self.error(
                        path,
                        "control characters in strings must be escaped (`\\n`, `\\u0001`)",
                    ));
                }
                Some(_) => {
                    // Copy one whole UTF-8 character.
                    let ch = self.text[self.pos..].chars().next().unwrap_or('\u{fffd}');
                    out.push(ch);
                    self.pos += ch.len_utf8();
                }
            }
        }
    }

    /// The `XXXX` of `\uXXXX` at `pos` (and the low half of a surrogate pair).
    fn unicode_escape(&mut self, path: &Path<'_>) -> Result<char> {
        let high = self.hex4(path)?;
        let code = match high {
            0xd800..=0xdbff => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(self.error(path, "lone surrogate in a `\\u` escape"));
                }
                self.pos += 2;
                let low = self.hex4(path)?;
                if !(0xdc00..=0xdfff).contains(&low) {
                    return Err(self.error(path, "lone surrogate in a `\\u` escape"));
                }
                0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
            }
            0xdc00..=0xdfff => return Err(self.error(path, "lone surrogate in a `\\u` escape")),
            _ => high,
        };
        char::from_u32(code).ok_or_else(|| self.error(path, "invalid `\\u` escape"))
    }

    fn hex4(&mut self, path: &Path<'_>) -> Result<u32> {
        let Some(hex) = self.bytes.get(self.pos..self.pos + 4) else {
            return Err(self.error(path, "`\\u` needs four hex digits"));
        };
        let mut v = 0;
        for &b in hex {
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.error(path, "`\\u` needs four hex digits")),
            };
            v = v << 4 | u32::from(d);
        }
        self.pos += 4;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(json: &str) -> Node<'_> {
        parse(json.as_bytes(), 64).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    fn err(json: &[u8]) -> CanonicalError {
        match parse(json, 64) {
            Ok(node) => panic!("{:?} parsed as {node:?}", String::from_utf8_lossy(json)),
            Err(e) => e,
        }
    }

    #[test]
    fn parses_strict_json() {
        assert!(matches!(ok(" {} "), Node::Object(m) if m.is_empty()));
        assert!(matches!(ok("[]"), Node::Array(a) if a.is_empty()));
        assert!(matches!(ok("-0.5e+3"), Node::Number(Num::Text("-0.5e+3"))));
        assert!(matches!(
            ok("12345678901234567890123"),
            Node::Number(Num::Text(_))
        ));
        assert!(matches!(
            ok(r#""plain""#),
            Node::Str(Cow::Borrowed("plain"))
        ));
        let Node::Str(s) = ok(r#""a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00""#) else {
            panic!()
        };
        assert_eq!(s, "a\"\\/\u{8}\u{c}\n\r\té😀");
        let Node::Object(m) = ok(r#"{"b":1,"a":[true,false,null],"B":{}}"#) else {
            panic!()
        };
        let names: Vec<&str> = m.iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["B", "a", "b"]);
    }

    #[test]
    fn rejects_what_rfc_8259_does_not_allow() {
        for bad in [
            "",
            " ",
            "{",
            "[1,]",
            r#"{"a":1,}"#,
            "01",
            "-01",
            "1.",
            ".5",
            "+1",
            "1e",
            "1e+",
            "-",
            "NaN",
            "Infinity",
            "-Infinity",
            "tru",
            "nul",
            "[1 2]",
            r#"{"a" 1}"#,
            "{a:1}",
            "'a'",
            "/* c */ 1",
            "1 // c",
            "\"\t\"",
            r#""\x""#,
            r#""\u12""#,
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            "1 2",
            "\u{feff}{}",
            "[1]x",
            "\u{a0}1",
        ] {
            let e = err(bad.as_bytes());
            assert_eq!(e.kind(), "invalid_json", "{bad:?}: {e}");
        }
        assert_eq!(err(b"\"\xff\"").kind(), "invalid_json");
    }

    #[test]
    fn reports_line_column_and_path() {
        let e = err(b"{\n  \"items\": [1, 2,]\n}");
        assert_eq!(e.path(), Some("$.items[2]"));
        let CanonicalError::InvalidJson { line, column, .. } = e else {
            panic!()
        };
        assert_eq!((line, column), (2, 18));
    }

    #[test]
    fn rejects_duplicate_member_names_after_unescaping() {
        let e = err(br#"{"x":{"a":1,"\u0061":2}}"#);
        assert_eq!(e.kind(), "duplicate_member");
        assert_eq!(e.path(), Some("$.x"));
    }

    #[test]
    fn limits_depth() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(deep(64).as_bytes(), 64).is_ok());
        let e = parse(deep(65).as_bytes(), 64).unwrap_err();
        assert_eq!(e.kind(), "too_deep");
        assert_eq!(e.path().unwrap().matches("[0]").count(), 64);
    }
}
