//! [`RequestHash`]: the 32-byte SHA-256 of a canonical text.

use core::fmt;
use core::str::FromStr;

use sha2::{Digest, Sha256};

use super::writer::CanonicalWriter;

/// SHA-256 of a request's canonical JSON text. `Display` gives 64 lowercase hex characters, the
/// form stored in `request_hash CHAR(64)` columns.
///
/// ```
/// use idem_runtime::RequestHash;
/// let h = RequestHash::of_bytes(br#"{"amount":100,"currency":"EUR"}"#);
/// assert_eq!(h.to_string().len(), 64);
/// assert_eq!(h.to_string().parse::<RequestHash>().unwrap(), h);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestHash([u8; 32]);

impl RequestHash {
    /// Wraps raw digest bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        RequestHash(bytes)
    }

    /// The raw digest bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// SHA-256 of `canonical` (which must already be a canonical text).
    pub fn of_bytes(canonical: &[u8]) -> Self {
        RequestHash(Sha256::digest(canonical).into())
    }

    /// Renders a canonical text with `write` and hashes it.
    pub fn of_canonical(write: impl FnOnce(&mut CanonicalWriter<'_>)) -> Self {
        render(write, Self::of_bytes)
    }
}

/// Renders a canonical text with `write` into a per-thread scratch buffer and hands it to
/// `finish`. The buffer and its initialized room are kept between calls (up to
/// `MAX_KEPT_BUF`), so rendering allocates nothing in the steady state.
pub(crate) fn render<R>(
    write: impl FnOnce(&mut CanonicalWriter<'_>),
    finish: impl FnOnce(&[u8]) -> R,
) -> R {
    CANONICAL_BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            let len = {
                let mut w = CanonicalWriter::scratch(&mut buf);
                write(&mut w);
                w.position()
            };
            let result = finish(&buf[..len]);
            if buf.capacity() > MAX_KEPT_BUF {
                *buf = Vec::new();
            }
            result
        }
        // A `write` that renders another text re-enters here and finds the buffer in use: the
        // inner text gets a buffer of its own.
        Err(_) => {
            let mut buf = Vec::new();
            let len = {
                let mut w = CanonicalWriter::scratch(&mut buf);
                write(&mut w);
                w.position()
            };
            finish(&buf[..len])
        }
    })
}

/// Largest per-thread scratch buffer kept between fingerprints.
const MAX_KEPT_BUF: usize = 64 * 1024;

thread_local! {
    static CANONICAL_BUF: core::cell::RefCell<Vec<u8>> = const { core::cell::RefCell::new(Vec::new()) };
}

impl RequestHash {
    /// The 64 lowercase hex digits of the hash (its `Display`), without allocating.
    pub(crate) fn hex(&self) -> [u8; 64] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = HEX[(b >> 4) as usize];
            out[2 * i + 1] = HEX[(b & 0xf) as usize];
        }
        out
    }
}

impl fmt::Display for RequestHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only ASCII hex digits were written.
        f.write_str(core::str::from_utf8(&self.hex()).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for RequestHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestHash({self})")
    }
}

/// A text that is not 64 hex characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a request hash is 64 hex characters (SHA-256), got {len} characters{detail}")]
pub struct ParseRequestHashError {
    len: usize,
    detail: &'static str,
}

/// The byte two hex digits (either case) write; `None` for anything but exactly two: no sign,
/// no space (`u8::from_str_radix` would take `+5`).
pub(crate) fn hex_byte(pair: &[u8]) -> Option<u8> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    match pair {
        [hi, lo] => Some(nibble(*hi)? << 4 | nibble(*lo)?),
        _ => None,
    }
}

impl FromStr for RequestHash {
    type Err = ParseRequestHashError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(ParseRequestHashError {
                len: bytes.len(),
                detail: "",
            });
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            match hex_byte(pair) {
                Some(byte) => out[i] = byte,
                None => {
                    return Err(ParseRequestHashError {
                        len: 64,
                        detail: ", not all of them hex digits",
                    });
                }
            }
        }
        Ok(RequestHash(out))
    }
}

impl serde::Serialize for RequestHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for RequestHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
