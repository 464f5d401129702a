//! [`ScopedKey`]: the client key scoped by its caller and operation (`tenant:user:operation:client_key`, S4).

use core::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::rules::{InvalidKey, validate_key};

/// Domain separator hashed before the parts, so a key hash can never equal the hash of some other
/// idem structure, and so the encoding can be versioned. v2: any number of scope parts, their
/// count hashed first (v1 had exactly two, tenant and user).
const KEY_HASH_DOMAIN: &[u8] = b"idem.scoped-key.v2\0";

/// A client's idempotency key, scoped by the caller (tenant, user, ...) and the operation (S4:
/// `tenant:user:endpoint:client_key`).
///
/// Two identities come out of it:
///
/// * [`ScopedKey::hash`]: SHA-256 of a **length-prefixed** encoding: the number of scope parts,
///   then each scope part, the operation and the client key, each as its byte length and its
///   bytes. This is the value of the `key_hash` column that the unique index `uk_idem_key` is
///   built on. The encoding is injective for any number and content of parts: tenant `a:b` +
///   user `c` and tenant `a` + user `b:c` differ, and so do `["t"]` and `["t", ""]`, or
///   `["t", "a:b"]` and `["t", "a", "b"]`.
/// * [`ScopedKey::readable`]: the parts joined by `:`, with `%` and `:` percent-escaped inside
///   each part (`%25`, `%3A`), and control characters too (each UTF-8 byte as `%XX`: a NUL is
///   `%00`); the last two are the operation and the client key. Also injective, stored beside
///   the hash for operators (column `idem_key`, in clear); nothing is decided by it.
///
/// Only the client key is validated, because only it comes from the client: 1 to 255
/// characters, no control characters.
///
/// ```
/// use idem_runtime::key::ScopedKey;
/// let k = ScopedKey::new(&["acme", "u-42"], "POST /payments", "8e03978e-40d5")?;
/// assert_eq!(k.readable(), "acme:u-42:POST /payments:8e03978e-40d5");
///
/// // The separator cannot be smuggled in: both keys differ in hash and readable form.
/// let a = ScopedKey::new(&["a:b", "c"], "op", "k")?;
/// let b = ScopedKey::new(&["a", "b:c"], "op", "k")?;
/// assert_ne!(a.hash(), b.hash());
/// assert_eq!(a.readable(), "a%3Ab:c:op:k");
///
/// // Any number of parts; a global key has none.
/// let three = ScopedKey::new(&["acme", "u-42", "acct:9"], "op", "k")?;
/// assert_eq!(three.readable(), "acme:u-42:acct%3A9:op:k");
/// assert_ne!(ScopedKey::new(&["t"], "op", "k")?, ScopedKey::new(&["t", ""], "op", "k")?);
/// assert_eq!(ScopedKey::new::<&str>(&[], "op", "k")?.readable(), "op:k");
/// # Ok::<(), idem_runtime::key::InvalidKey>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ScopedKey {
    hash: [u8; 32],
    readable: String,
    /// The operation as given (also inside `readable`, escaped): a label for logs and metrics,
    /// shared so that neither cloning the key nor labelling a metric allocates.
    operation: Arc<str>,
}

impl ScopedKey {
    /// Scopes `client_key` to the scope parts `scope` (none for a key shared by every caller)
    /// and `operation`.
    ///
    /// # Errors
    /// [`InvalidKey`] when `client_key` is empty, longer than 255 characters, or contains a
    /// control character ([`validate_key`]).
    pub fn new<S: AsRef<str>>(
        scope: &[S],
        operation: &str,
        client_key: &str,
    ) -> Result<Self, InvalidKey> {
        validate_key(client_key)?;
        let parts = || {
            scope
                .iter()
                .map(AsRef::as_ref)
                .chain([operation, client_key])
        };
        let mut hasher = Sha256::new();
        hasher.update(KEY_HASH_DOMAIN);
        hasher.update((scope.len() as u64).to_be_bytes());
        let mut len = 0;
        for part in parts() {
            // Length prefix: the parts can contain any byte, the boundaries are never ambiguous.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
            len += part.len() + 1;
        }
        // Room for a few escapes (a module path's `::` takes 6 bytes).
        let mut readable = String::with_capacity(len + 16);
        for part in scope {
            escape_part(part.as_ref(), &mut readable);
            readable.push(':');
        }
        let operation = interned(operation, &mut readable);
        readable.push(':');
        escape_part(client_key, &mut readable);
        Ok(ScopedKey {
            hash: hasher.finalize().into(),
            readable,
            operation,
        })
    }

    /// The 32-byte SHA-256 stored in the `key_hash` column (unique index `uk_idem_key`).
    pub fn hash(&self) -> &[u8; 32] {
        &self.hash
    }

    /// The operator-readable form: `<scope parts>:operation:client_key`, `%`, `:` and control
    /// characters escaped inside each part.
    pub fn readable(&self) -> &str {
        &self.readable
    }

    /// The same key with nothing readable of its scope parts or client key: its readable form
    /// becomes `<operation>:sealed:<key hash in hex>`, what an encrypting handle
    /// ([`Idem::with_encryption`](crate::engine::Idem::with_encryption)) stores in the
    /// `idem_key` column. The hash, the identity of the record, is unchanged.
    ///
    /// ```
    /// use idem_runtime::key::ScopedKey;
    /// let key = ScopedKey::new(&["acme", "u1"], "pay", "order-42")?;
    /// let opaque = key.opaque();
    /// assert_eq!(opaque.hash(), key.hash());
    /// assert_eq!(opaque.readable(), format!("pay:sealed:{}", key.hash_hex()));
    /// # Ok::<(), idem_runtime::key::InvalidKey>(())
    /// ```
    pub fn opaque(&self) -> ScopedKey {
        ScopedKey {
            hash: self.hash,
            readable: opaque_form(&self.operation, self.hash_hex()),
            operation: Arc::clone(&self.operation),
        }
    }

    /// [`ScopedKey::opaque`]'s readable form for the key whose readable form is `readable` and
    /// whose hash is `hash`, for tools that seal records they read from a store (`idem
    /// rekey`): the operation is taken from `readable` and unescaped, so that the result is
    /// the one an encrypting handle writes, even for an operation with `:` or `%` in it (a gRPC
    /// method's `pkg::Service/Method`). `None` when `readable` is not a readable form.
    ///
    /// ```
    /// use idem_runtime::key::ScopedKey;
    /// let key = ScopedKey::new(&["acme"], "payments::v1::Payments/Create", "k-1")?;
    /// let opaque = ScopedKey::opaque_readable(key.readable(), key.hash());
    /// assert_eq!(opaque, Some(key.opaque().readable().to_owned()));
    /// # Ok::<(), idem_runtime::key::InvalidKey>(())
    /// ```
    pub fn opaque_readable(readable: &str, hash: &[u8; 32]) -> Option<String> {
        let operation = unescape_part(readable.rsplit(':').nth(1)?)?;
        Some(opaque_form(&operation, Hex(hash)))
    }

    /// The operation this key is scoped to, as given to [`ScopedKey::new`].
    pub fn operation(&self) -> &str {
        &self.operation
    }

    /// [`ScopedKey::operation`], shared: the `operation` label of idem's metrics.
    #[cfg(feature = "metrics")]
    pub(crate) fn shared_operation(&self) -> Arc<str> {
        Arc::clone(&self.operation)
    }

    /// [`ScopedKey::hash`] as 64 lowercase hex digits, written without allocating: what idem's
    /// logs and spans carry instead of the readable key, whose client key and scope parts
    /// (tenant and user ids) are personal data in many deployments. An operator finds the
    /// record by it (the `key_hash` column).
    ///
    /// ```
    /// use idem_runtime::key::ScopedKey;
    /// let k = ScopedKey::new(&["acme"], "op", "k-1")?;
    /// let hex = k.hash_hex().to_string();
    /// assert_eq!(hex.len(), 64);
    /// assert!(!hex.contains("acme"));
    /// # Ok::<(), idem_runtime::key::InvalidKey>(())
    /// ```
    pub fn hash_hex(&self) -> impl fmt::Display + '_ {
        Hex(&self.hash)
    }
}

impl fmt::Debug for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScopedKey({:?})", self.readable)
    }
}

impl fmt::Display for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.readable)
    }
}

/// At most this many operation names are kept per thread by [`interned`].
const MAX_INTERNED: usize = 256;

/// `operation` shared: the same `Arc` for every key of an operation this thread has scoped
/// before (a service has a handful of operations, each scoping a key per request), so that
/// scoping a key allocates its readable form only, and the metrics find their labels by
/// pointer; its escaped form (a module path's `::` escaped) is appended to `readable`, kept
/// with it rather than escaped again. Past [`MAX_INTERNED`] names, a new `Arc` each time.
fn interned(operation: &str, readable: &mut String) -> Arc<str> {
    std::thread_local! {
        static OPERATIONS: core::cell::RefCell<Vec<(Arc<str>, Box<str>)>> =
            const { core::cell::RefCell::new(Vec::new()) };
    }
    OPERATIONS.with_borrow_mut(|known| {
        if let Some((op, escaped)) = known.iter().find(|(op, _)| **op == *operation) {
            readable.push_str(escaped);
            return Arc::clone(op);
        }
        let mut escaped = String::new();
        escape_part(operation, &mut escaped);
        readable.push_str(&escaped);
        let op: Arc<str> = operation.into();
        if known.len() < MAX_INTERNED {
            known.push((Arc::clone(&op), escaped.into_boxed_str()));
        }
        op
    })
}

/// A key hash as 64 lowercase hex digits, written without allocating.
struct Hex<'a>(&'a [u8; 32]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = DIGITS[usize::from(b >> 4)];
            out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
        // Only ASCII hex digits were written.
        f.write_str(core::str::from_utf8(&out).unwrap_or_default())
    }
}

/// `<operation>:sealed:<key hash>`, the readable form of a sealed record's key.
fn opaque_form(operation: &str, hash_hex: impl fmt::Display) -> String {
    format!("{operation}:sealed:{hash_hex}")
}

/// The part [`escape_part`] escaped to `escaped`; `None` for a `%` not followed by two hex
/// digits, or bytes that are not UTF-8.
fn unescape_part(escaped: &str) -> Option<String> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            out.push(crate::encode::hex_byte(&[bytes.next()?, bytes.next()?])?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

fn escape_part(part: &str, out: &mut String) {
    // The usual part needs no escape: copied at once.
    if !part
        .bytes()
        .any(|b| matches!(b, b'%' | b':') || b.is_ascii_control() || b >= 0x80)
    {
        out.push_str(part);
        return;
    }
    // Runs of characters kept as they are (a module path's `::` is escaped, its words are not)
    // are copied at once.
    let mut kept = 0;
    for (i, c) in part.char_indices() {
        let escaped = match c {
            '%' => "%25",
            ':' => "%3A",
            c if c.is_control() => "",
            _ => continue,
        };
        out.push_str(&part[kept..i]);
        kept = i + c.len_utf8();
        if escaped.is_empty() {
            // Unreadable, and PostgreSQL's `TEXT` refuses U+0000: each UTF-8 byte as `%XX`.
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        } else {
            out.push_str(escaped);
        }
    }
    out.push_str(&part[kept..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(t: &str, u: &str, o: &str, c: &str) -> ScopedKey {
        ScopedKey::new(&[t, u], o, c).unwrap()
    }

    #[test]
    fn separator_inside_a_part_does_not_collide() {
        let a = key("a:b", "c", "op", "k");
        let b = key("a", "b:c", "op", "k");
        assert_ne!(a.hash(), b.hash());
        assert_ne!(a.readable(), b.readable());
        assert_eq!(b.readable(), "a:b%3Ac:op:k");
        // An escape sequence typed literally is escaped again.
        let c = key("a%3Ab", "c", "op", "k");
        assert_ne!(a.readable(), c.readable());
        assert_eq!(c.readable(), "a%253Ab:c:op:k");
    }

    #[test]
    fn control_characters_are_escaped_in_the_readable_form() {
        let k = key("t\0\n", "u\u{85}\u{7f}", "op", "k");
        assert_eq!(k.readable(), "t%00%0A:u%C2%85%7F:op:k");
        // Printable non-ASCII stays as it is; an escape typed literally is escaped again.
        assert_eq!(key("é中", "%00", "op", "k").readable(), "é中:%2500:op:k");
        assert_ne!(key("\0", "", "op", "k"), key("%00", "", "op", "k"));
    }

    #[test]
    fn runs_between_escapes_are_kept_whole() {
        // An operation named after a Rust path, the escapes at its start, middle and end.
        let k = ScopedKey::new(&[":a\tb:"], "Svc::create_payment", "k").unwrap();
        assert_eq!(k.readable(), "%3Aa%09b%3A:Svc%3A%3Acreate_payment:k");
        let k = ScopedKey::new(&["é:中%"], "op", "k").unwrap();
        assert_eq!(k.readable(), "é%3A中%25:op:k");
    }

    #[test]
    fn an_operation_escaped_once_reads_the_same_every_time() {
        // The first key of an operation escapes it; later ones take the escaped form kept with
        // the interned name.
        let name = "Svc::refund_escaped_once";
        for (scope, client) in [(&["t"][..], "k-1"), (&["t:u"][..], "k:2"), (&[][..], "k-3")] {
            let k = ScopedKey::new(scope, name, client).unwrap();
            let scope: Vec<String> = scope.iter().map(|p| p.replace(':', "%3A")).collect();
            let mut want = scope.join(":");
            if !want.is_empty() {
                want.push(':');
            }
            want.push_str(&format!(
                "Svc%3A%3Arefund_escaped_once:{}",
                client.replace(':', "%3A")
            ));
            assert_eq!(k.readable(), want);
            assert_eq!(k.operation(), name);
        }
    }

    #[test]
    fn empty_parts_are_positions_too() {
        assert_ne!(
            key("", "x", "op", "k").hash(),
            key("x", "", "op", "k").hash()
        );
        assert_eq!(key("", "", "op", "k").readable(), "::op:k");
    }

    #[test]
    fn the_number_of_parts_counts() {
        let k = |scope: &[&str]| ScopedKey::new(scope, "op", "k").unwrap();
        assert_ne!(k(&["t"]), k(&["t", ""]));
        assert_ne!(k(&[]), k(&[""]));
        assert_ne!(k(&["t", "a:b"]), k(&["t", "a", "b"]));
        assert_ne!(k(&["t", "a:b"]).readable(), k(&["t", "a", "b"]).readable());
        assert_eq!(k(&["t", "u"]), key("t", "u", "op", "k"));
    }

    #[test]
    fn client_key_validation() {
        assert_eq!(ScopedKey::new(&["t", "u"], "o", ""), Err(InvalidKey::Empty));
        let long = "é".repeat(256);
        assert_eq!(
            ScopedKey::new(&["t", "u"], "o", &long),
            Err(InvalidKey::TooLong { chars: 256 })
        );
        // 255 characters of 2-byte UTF-8 are fine (the limit counts characters).
        assert!(ScopedKey::new(&["t", "u"], "o", &"é".repeat(255)).is_ok());
        assert_eq!(
            ScopedKey::new(&["t", "u"], "o", "ab\ncd"),
            Err(InvalidKey::ControlCharacter {
                code: 0x0a,
                index: 2
            })
        );
        let msg = InvalidKey::TooLong { chars: 300 }.to_string();
        assert!(msg.contains("at most 255"), "{msg}");
    }

    #[test]
    fn a_readable_form_escapes_with_hex_digits_only() {
        let hash = [0u8; 32];
        assert_eq!(
            ScopedKey::opaque_readable("acme:op%3Ax:k", &hash).as_deref(),
            Some("op:x:sealed:0000000000000000000000000000000000000000000000000000000000000000")
        );
        // `%+5` is no escape idem writes: not a readable form.
        assert_eq!(ScopedKey::opaque_readable("acme:op%+5:k", &hash), None);
    }

    #[test]
    fn hash_is_stable() {
        // Pinned: changing the encoding silently would orphan every stored record.
        let k = key("acme", "u1", "POST /payments", "abc");
        let hex: String = k.hash().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, PINNED_HASH);
        assert_eq!(k.hash_hex().to_string(), PINNED_HASH);
        assert_eq!(k.operation(), "POST /payments");
    }

    // SHA-256("idem.scoped-key.v2\0" || u64 BE number of scope parts || for each part, the
    // operation and the client key: u64 BE length || bytes), checked with Python.
    const PINNED_HASH: &str = "4c2d816c9f0ef325ac24606b4d88a9730fafe2d344c2895e6d7ef785129d8f1b";

    fn part() -> impl Strategy<Value = String> {
        // Small alphabet full of separators, escape characters and control characters (escaped
        // in the readable form), so collisions would show up.
        proptest::string::string_regex("[a:%3Ab\\x00\\n]{0,6}").unwrap()
    }

    fn client() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[a:%3Ab]{1,6}").unwrap()
    }

    proptest! {
        #[test]
        fn encoding_is_injective_for_any_number_of_parts(
            a in (proptest::collection::vec(part(), 0..4), part(), client()),
            b in (proptest::collection::vec(part(), 0..4), part(), client()),
        ) {
            let ka = ScopedKey::new(&a.0, &a.1, &a.2).unwrap();
            let kb = ScopedKey::new(&b.0, &b.1, &b.2).unwrap();
            prop_assert_eq!(ka.hash() == kb.hash(), a == b);
            prop_assert_eq!(ka.readable() == kb.readable(), a == b);
        }

        #[test]
        fn opaque_from_the_readable_form_is_the_handles(
            a in (proptest::collection::vec(part(), 0..4), part(), client()),
        ) {
            let key = ScopedKey::new(&a.0, &a.1, &a.2).unwrap();
            let opaque = ScopedKey::opaque_readable(key.readable(), key.hash());
            let handles = key.opaque();
            prop_assert_eq!(opaque.as_deref(), Some(handles.readable()));
        }

        #[test]
        fn encoding_is_injective(
            a in (part(), part(), part(), client()),
            b in (part(), part(), part(), client()),
        ) {
            let ka = key(&a.0, &a.1, &a.2, &a.3);
            let kb = key(&b.0, &b.1, &b.2, &b.3);
            prop_assert_eq!(ka.hash() == kb.hash(), a == b);
            prop_assert_eq!(ka.readable() == kb.readable(), a == b);
        }
    }
}
