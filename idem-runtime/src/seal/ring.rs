//! The key ring: the keys that seal stored responses ([`KeyRing`]), built from code or parsed
//! from a list `ID:BASE64,ID:BASE64`, and why a list does not build ([`KeyRingError`]).

use core::fmt;

use base64::Engine as _;
use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::KeyInit;

/// The longest key id, in bytes.
const MAX_ID: usize = 64;

/// Keys that seal stored responses: the primary seals every new record, the others only open
/// records sealed before a rotation. Built from code or from a list `ID:BASE64,ID:BASE64` (the
/// form `PAYMENTS_ENCRYPTION_KEYS` takes), the first the primary; every key is 32 bytes.
///
/// ```
/// use idem_runtime::seal::KeyRing;
/// let ring = KeyRing::parse(
///     "k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=,k1:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=",
/// )?;
/// assert_eq!(ring.primary(), "k2");
/// assert_eq!(ring.ids().collect::<Vec<_>>(), ["k2", "k1"]);
/// # Ok::<(), idem_runtime::seal::KeyRingError>(())
/// ```
#[derive(Clone)]
pub struct KeyRing {
    /// The primary first.
    pub(super) keys: Vec<(String, XChaCha20Poly1305)>,
    /// Plaintext and format-1 records open as they are ([`KeyRing::accepting_plaintext`]).
    pub(super) accept_plaintext: bool,
    /// New records are sealed under the primary; `false` once encryption is being switched off
    /// ([`KeyRing::sealing_nothing`]).
    pub(super) seals: bool,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .field("accept_plaintext", &self.accept_plaintext)
            .field("seals", &self.seals)
            .finish_non_exhaustive()
    }
}

/// A key ring that cannot be built as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRingError {
    /// A key id that is empty, longer than 64 bytes, or not made of `A-Z a-z 0-9 . _ -`.
    #[error(
        "key id `{0}` is not usable: use 1 to 64 characters among letters, digits, `.`, `_` and `-`"
    )]
    BadId(String),
    /// Two keys with one id.
    #[error("key id `{0}` appears twice: give every key its own id")]
    DuplicateId(String),
    /// An entry that is not `ID:BASE64`.
    #[error("`{0}` is not `ID:BASE64`: write each key as its id, a colon and the key in base64")]
    BadEntry(String),
    /// A key that is not 32 bytes of base64.
    #[error(
        "key `{id}` is not 32 bytes of base64 ({detail}): generate one with `openssl rand -base64 32`"
    )]
    BadKey {
        /// The key's id.
        id: String,
        /// What is wrong with it.
        detail: String,
    },
    /// No key at all.
    #[error("no key: give at least one `ID:BASE64` entry")]
    Empty,
}

impl KeyRing {
    /// A ring of one key, the primary.
    ///
    /// # Errors
    /// [`KeyRingError::BadId`] for an unusable id.
    pub fn new(id: &str, key: [u8; 32]) -> Result<Self, KeyRingError> {
        Ok(KeyRing {
            keys: vec![(checked_id(id)?, XChaCha20Poly1305::new(&key.into()))],
            accept_plaintext: false,
            seals: true,
        })
    }

    /// Opens what its keys sealed and seals nothing: for switching encryption off. A handle
    /// with it stores new responses in plaintext (and their readable key in full), replays the
    /// records sealed before, and accepts plaintext ones; `idem rekey` with it opens every
    /// sealed record back to plaintext. Once `idem rekey --dry-run` finds nothing left, drop
    /// the ring: a handle without one answers `503 record-sealed` for a sealed record.
    ///
    /// ```
    /// use idem_runtime::seal::KeyRing;
    /// let switching_off = KeyRing::new("k1", [7; 32])?.sealing_nothing();
    /// assert!(!switching_off.seals() && switching_off.accepts_plaintext());
    /// # Ok::<(), idem_runtime::seal::KeyRingError>(())
    /// ```
    #[must_use]
    pub fn sealing_nothing(mut self) -> Self {
        self.seals = false;
        self.accept_plaintext = true;
        self
    }

    /// Whether new records are sealed ([`KeyRing::sealing_nothing`] says not).
    pub fn seals(&self) -> bool {
        self.seals
    }

    /// Also replays plaintext records, and records sealed in format 1: for switching encryption
    /// on over a store that holds plaintext records (and for the versions that sealed in format
    /// 1), until `idem rekey` has sealed them all in the current format. Then build the ring
    /// without it: while it is on, a database writer can write a plaintext response that
    /// replays. Without it (the default) such a record answers `503 record-sealed`.
    ///
    /// ```
    /// use idem_runtime::seal::KeyRing;
    /// let switching = KeyRing::new("k1", [7; 32])?.accepting_plaintext();
    /// assert!(switching.accepts_plaintext());
    /// assert!(!KeyRing::new("k1", [7; 32])?.accepts_plaintext());
    /// # Ok::<(), idem_runtime::seal::KeyRingError>(())
    /// ```
    #[must_use]
    pub fn accepting_plaintext(mut self) -> Self {
        self.accept_plaintext = true;
        self
    }

    /// Whether plaintext and format-1 records replay ([`KeyRing::accepting_plaintext`]).
    pub fn accepts_plaintext(&self) -> bool {
        self.accept_plaintext
    }

    /// Adds an older key, which opens records sealed under `id` and seals nothing.
    ///
    /// # Errors
    /// [`KeyRingError::BadId`] or [`KeyRingError::DuplicateId`].
    pub fn with_older(mut self, id: &str, key: [u8; 32]) -> Result<Self, KeyRingError> {
        let id = checked_id(id)?;
        if self.keys.iter().any(|(k, _)| *k == id) {
            return Err(KeyRingError::DuplicateId(id));
        }
        self.keys.push((id, XChaCha20Poly1305::new(&key.into())));
        Ok(self)
    }

    /// Parses `ID:BASE64,ID:BASE64,..` (spaces around entries ignored), the first the primary.
    ///
    /// # Errors
    /// A [`KeyRingError`] naming the entry at fault; no key material appears in it.
    pub fn parse(list: &str) -> Result<Self, KeyRingError> {
        let mut ring: Option<KeyRing> = None;
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((id, b64)) = entry.split_once(':') else {
                // Not echoed whole: it may be a key pasted without its id.
                return Err(KeyRingError::BadEntry(redact(entry)));
            };
            let id = id.trim();
            let key = decode_key(id, b64.trim())?;
            ring = Some(match ring {
                None => KeyRing::new(id, key)?,
                Some(ring) => ring.with_older(id, key)?,
            });
        }
        ring.ok_or(KeyRingError::Empty)
    }

    /// The id of the key that seals new records.
    pub fn primary(&self) -> &str {
        &self.keys[0].0
    }

    /// Every key id, the primary first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(id, _)| id.as_str())
    }
}

fn checked_id(id: &str) -> Result<String, KeyRingError> {
    let usable = !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if usable {
        Ok(id.to_owned())
    } else {
        Err(KeyRingError::BadId(redact(id)))
    }
}

fn decode_key(id: &str, b64: &str) -> Result<[u8; 32], KeyRingError> {
    let bad = |detail: String| KeyRingError::BadKey {
        id: redact(id),
        detail,
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64))
        .map_err(|_| bad("not base64".to_owned()))?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| bad(format!("{} bytes", bytes.len())))
}

/// At most 16 characters of `s`, for an error message that may hold a pasted key.
fn redact(s: &str) -> String {
    match s.char_indices().nth(16) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}
