//! The sealed format: the [`SEALED`] marker, the format versions, the associated data that binds
//! a record ([`Binding`]), sealing and opening a record's response, and [`SealError`].

use chacha20poly1305::XNonce;
use chacha20poly1305::aead::{Aead, Payload};

use super::ring::KeyRing;
use crate::fingerprint::RequestHash;
use crate::store::{Completion, Record, RecordState};

/// The name of the header entry that marks a sealed record (it starts with a NUL byte, which
/// no HTTP header name contains).
pub const SEALED: &str = "\0idem-sealed";

/// The format of sealed records this build writes: the associated data binds a [`Binding`].
pub(super) const VERSION: u8 = 2;

/// The first format, whose associated data bound the key id and the key hash only: opened while
/// the ring accepts plaintext ([`KeyRing::accepting_plaintext`]), resealed by `idem rekey`.
pub(super) const VERSION_1: u8 = 1;

pub(super) const NONCE: usize = 24;

/// The beginning of a sealed record's business number column: its receipt,
/// `idem-receipt:<format>:<key id>:<base64 of nonce and ciphertext>`. The receipt seals the
/// business number again, bound like the response, so that a remembered record whose response
/// the purge freed still proves what it is, when a retry of it is answered `410 key-expired`.
pub const RECEIPT: &str = "idem-receipt:";

/// What a replay depends on besides the stored response itself: bound to its seal, so that a
/// database writer who changes any of it beside the ciphertext makes the record not open.
///
/// The operation id stands for the record's creation: it is drawn at random whenever a key is
/// claimed afresh and kept across takeovers, so a response sealed for an earlier operation of
/// the same key (a row restored from a backup, say) does not open in a later one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The record's operation id (its `operation_id` column).
    pub operation_id: String,
    /// The hash of the request the response answers (`request_hash`): with it bound, no other
    /// request can be handed this response.
    pub request_hash: RequestHash,
    /// The stored status (`resp_status`).
    pub status: u16,
    /// Completed or failed-but-stored (`state`).
    pub state: RecordState,
}

impl Binding {
    /// The binding of a record as a store answers it.
    pub fn of(record: &Record) -> Binding {
        Binding {
            operation_id: record.operation_id.clone(),
            request_hash: record.request_hash,
            status: record.status.unwrap_or(0),
            state: record.state,
        }
    }
}

/// A sealed record that does not open: never replayed, never overwritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Sealed under a key id the ring does not hold (removed, or not loaded here).
    #[error(
        "the stored response is sealed under key `{0}`, which the key ring does not hold: add it back (as an older key) to read this record"
    )]
    UnknownKey(String),
    /// The tag does not verify: the ciphertext, its key id or its row was changed, or the key
    /// under this id is another one.
    #[error(
        "the stored response does not open under key `{0}`: the record was altered, moved to another row, or the key under this id changed"
    )]
    Tampered(String),
    /// A seal of a format this build does not know, or a plaintext that does not decode.
    #[error("the stored response is sealed in a form this build cannot read: {0}")]
    Malformed(String),
    /// A plaintext response (or one sealed in format 1, which binds neither its status nor its
    /// request) where the ring expects every response sealed: written before encryption was
    /// switched on, or by someone who could write to the database but not seal.
    #[error(
        "the stored response is {0} where every stored response must be sealed: if encryption was switched on recently, accept such records with KeyRing::accepting_plaintext until `idem rekey` has sealed them all; otherwise a database writer put it there"
    )]
    Unsealed(&'static str),
}

impl KeyRing {
    /// Seals `completion`'s headers, body and business number under the primary key, bound to
    /// the record of key hash `key_hash` (hex), operation `operation_id`, the request of
    /// `request_hash`, and `completion`'s status and outcome, which stay as they are.
    ///
    /// # Errors
    /// The operating system's random generator failed: nothing is sealed (a nonce that is not
    /// random would be far worse than a write refused like a store error).
    pub(crate) fn seal(
        &self,
        key_hash: &str,
        operation_id: &str,
        request_hash: &RequestHash,
        completion: &Completion,
    ) -> Result<Completion, getrandom::Error> {
        let binding = Binding {
            operation_id: operation_id.to_owned(),
            request_hash: *request_hash,
            status: completion.status,
            state: completion.outcome.into(),
        };
        let (id, body) = self.seal_bytes(&encode_plain(completion), |id| {
            aad(VERSION, id, key_hash, Some(&binding))
        })?;
        let mut meta = Vec::with_capacity(1 + id.len());
        meta.push(VERSION);
        meta.extend_from_slice(id.as_bytes());
        let receipt = self.receipt(key_hash, &binding, completion.biz_no.as_deref())?;
        Ok(Completion {
            outcome: completion.outcome,
            status: completion.status,
            headers: vec![(SEALED.to_owned(), meta)],
            body,
            biz_no: Some(receipt),
            expire_at: completion.expire_at,
        })
    }

    /// The receipt of a sealed record ([`RECEIPT`]): `biz_no` sealed under the primary key with
    /// its own nonce, bound as the response is, in the business number column, which the purge
    /// keeps when it frees a remembered record's response.
    pub(super) fn receipt(
        &self,
        key_hash: &str,
        binding: &Binding,
        biz_no: Option<&str>,
    ) -> Result<String, getrandom::Error> {
        use base64::Engine as _;
        let mut plain = vec![u8::from(biz_no.is_some())];
        plain.extend_from_slice(biz_no.unwrap_or("").as_bytes());
        let (id, raw) = self.seal_bytes(&plain, |id| receipt_aad(id, key_hash, binding))?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(raw);
        Ok(format!("{RECEIPT}{VERSION}:{id}:{encoded}"))
    }

    /// `plain` sealed under the primary key with a fresh random nonce, authenticated with the
    /// AAD `aad` makes of the key's id: that id, and the nonce followed by the ciphertext.
    fn seal_bytes(
        &self,
        plain: &[u8],
        aad: impl FnOnce(&str) -> Vec<u8>,
    ) -> Result<(&str, Vec<u8>), getrandom::Error> {
        let (id, cipher) = &self.keys[0];
        let mut nonce = [0u8; NONCE];
        getrandom::fill(&mut nonce)?;
        let sealed = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: &aad(id),
                },
            )
            .expect("XChaCha20-Poly1305 seals any length idem stores");
        let mut out = Vec::with_capacity(NONCE + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok((id, out))
    }

    /// `raw` (a nonce followed by the ciphertext) opened under the ring's key `id`, checked
    /// against `aad`.
    fn open_bytes(&self, id: &str, raw: &[u8], aad: &[u8]) -> Result<Vec<u8>, SealError> {
        let cipher = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, c)| c)
            .ok_or_else(|| SealError::UnknownKey(id.to_owned()))?;
        if raw.len() < NONCE {
            return Err(SealError::Tampered(id.to_owned()));
        }
        let (nonce, sealed) = raw.split_at(NONCE);
        cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad })
            .map_err(|_| SealError::Tampered(id.to_owned()))
    }

    /// The business number a receipt ([`RECEIPT`]) seals, checked against the record's
    /// [`Binding`] and key hash (hex).
    ///
    /// # Errors
    /// A [`SealError`] when it does not open: the record was altered, or its key is not in the
    /// ring.
    pub(crate) fn open_receipt(
        &self,
        key_hash: &str,
        binding: &Binding,
        receipt: &str,
    ) -> Result<Option<String>, SealError> {
        use base64::Engine as _;
        let rest = receipt
            .strip_prefix(RECEIPT)
            .ok_or_else(|| malformed("a receipt without its prefix"))?;
        let mut parts = rest.splitn(3, ':');
        let (Some(version), Some(id), Some(encoded)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("a receipt without its key id"));
        };
        if version != VERSION.to_string() {
            return Err(malformed(&format!("receipt format {version}")));
        }
        if !self.keys.iter().any(|(k, _)| k == id) {
            return Err(SealError::UnknownKey(id.to_owned()));
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| SealError::Tampered(id.to_owned()))?;
        let plain = self.open_bytes(id, &raw, &receipt_aad(id, key_hash, binding))?;
        match plain.split_first() {
            Some((0, [])) => Ok(None),
            Some((1, biz_no)) => String::from_utf8(biz_no.to_vec())
                .map(Some)
                .map_err(|_| malformed("a receipt whose business number is not UTF-8")),
            _ => Err(malformed("a receipt that does not decode")),
        }
    }

    /// Opens a record sealed by [`seal`](Self::seal) under any key of the ring, checking its
    /// [`Binding`]; a plaintext record (no [`SEALED`] entry) comes back as it is if the ring
    /// accepts plaintext.
    ///
    /// # Errors
    /// A [`SealError`]: the record must then be neither replayed nor overwritten.
    pub(crate) fn open(&self, key_hash: &str, mut record: Record) -> Result<Record, SealError> {
        if record.state == RecordState::Processing {
            // No response stored yet: nothing sealed, nothing to refuse.
            return Ok(record);
        }
        let binding = Binding::of(&record);
        let opened = self.open_parts(
            key_hash,
            &binding,
            &record.headers,
            &record.body,
            self.accept_plaintext,
        )?;
        match opened {
            Some((headers, biz_no, body)) => {
                record.headers = headers;
                record.biz_no = biz_no;
                record.body = body;
            }
            // Accepted as plaintext, yet it holds the receipt of a sealed record: its sealed
            // response was replaced.
            None if record
                .biz_no
                .as_deref()
                .is_some_and(|b| b.starts_with(RECEIPT)) =>
            {
                return Err(malformed(
                    "a sealed record's receipt beside a plaintext response: the record was altered",
                ));
            }
            None => {}
        }
        Ok(record)
    }

    /// The plaintext of a sealed response (`headers` with its [`SEALED`] entry, `body` the nonce
    /// and ciphertext) bound to `binding`, or `None` for a plaintext one when `plaintext` says
    /// plaintext and format-1 records are accepted.
    pub(super) fn open_parts(
        &self,
        key_hash: &str,
        binding: &Binding,
        headers: &[(String, Vec<u8>)],
        body: &[u8],
        plaintext: bool,
    ) -> Result<Option<Plain>, SealError> {
        let Some(meta) = sealed_meta(headers)? else {
            return if plaintext {
                Ok(None)
            } else {
                Err(SealError::Unsealed("plaintext"))
            };
        };
        let (version, id) = meta.split_first().ok_or_else(|| malformed("no version"))?;
        let bound = match *version {
            VERSION => Some(binding),
            VERSION_1 if plaintext => None,
            VERSION_1 => return Err(SealError::Unsealed("sealed in format 1")),
            version => return Err(malformed(&format!("format version {version}"))),
        };
        let id = core::str::from_utf8(id).map_err(|_| malformed("a key id that is not UTF-8"))?;
        let plain = self.open_bytes(id, body, &aad(*version, id, key_hash, bound))?;
        decode_plain(&plain)
            .map(Some)
            .ok_or_else(|| malformed("a plaintext that does not decode"))
    }
}

impl SealError {
    /// The `reason` label of the metric counting records that did not open.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            SealError::UnknownKey(_) => "unknown_key",
            SealError::Tampered(_) => "tampered",
            SealError::Malformed(_) => "malformed",
            SealError::Unsealed(_) => "unsealed",
        }
    }
}

/// Opens `record` with `ring`; without a ring, a sealed record is [`SealError::UnknownKey`]
/// (replaying its ciphertext would answer wrongly) and a plaintext one comes back as it is.
pub(crate) fn open_record(
    ring: Option<&KeyRing>,
    key: &crate::key::ScopedKey,
    record: Record,
) -> Result<Record, SealError> {
    match ring {
        Some(ring) => ring.open(&key.hash_hex().to_string(), record),
        None => match sealed_meta(&record.headers)? {
            None => Ok(record),
            Some(meta) => Err(SealError::UnknownKey(
                String::from_utf8_lossy(meta.get(1..).unwrap_or_default()).into_owned(),
            )),
        },
    }
}

/// Opens a remembered record (past its TTL, [`Claim::Remembered`](crate::store::Claim)) as
/// [`open_record`] does while it still holds its response. Once the purge freed the response,
/// its receipt ([`RECEIPT`], in the business number column) is what proves it: it opens only
/// under the record's [`Binding`] (operation id, request hash, status, state) and key hash,
/// and gives the business number back. A ring that refuses plaintext refuses a freed record
/// without a receipt ([`SealError::Unsealed`]): a sealing handle writes one with every
/// response, so such a record was written by someone who could not seal. Without a ring, a
/// receipt is [`SealError::UnknownKey`], as a sealed response is.
pub(crate) fn open_remembered(
    ring: Option<&KeyRing>,
    key: &crate::key::ScopedKey,
    mut record: Record,
) -> Result<Record, SealError> {
    if !(record.headers.is_empty() && record.body.is_empty()) {
        return open_record(ring, key, record);
    }
    let receipt = record.biz_no.take_if(|b| b.starts_with(RECEIPT));
    match (ring, receipt) {
        (Some(ring), Some(receipt)) => {
            let binding = Binding::of(&record);
            record.biz_no = ring.open_receipt(&key.hash_hex().to_string(), &binding, &receipt)?;
        }
        (Some(ring), None) if !ring.accept_plaintext => {
            return Err(SealError::Unsealed(
                "a freed response without its sealed receipt",
            ));
        }
        (None, Some(receipt)) => {
            let id = receipt[RECEIPT.len()..].split(':').nth(1).unwrap_or("");
            return Err(SealError::UnknownKey(id.to_owned()));
        }
        (_, None) => {}
    }
    Ok(record)
}

/// The associated data of a receipt: a domain of its own, then what [`aad`] binds for a
/// response (format 2).
fn receipt_aad(id: &str, key_hash: &str, binding: &Binding) -> Vec<u8> {
    let mut out = b"idem-receipt\0".to_vec();
    out.extend_from_slice(&aad(VERSION, id, key_hash, Some(binding)));
    out
}

/// The value of a record's [`SEALED`] entry when it is sealed, `None` when it is plaintext.
///
/// # Errors
/// [`SealError::Malformed`] when the entry is there beside other entries: idem writes it alone,
/// so someone added to a sealed record's headers (which would otherwise read as a plaintext
/// record and replay its ciphertext).
pub(crate) fn sealed_meta(headers: &[(String, Vec<u8>)]) -> Result<Option<&[u8]>, SealError> {
    match headers {
        [(name, meta)] if name == SEALED => Ok(Some(meta)),
        _ if headers.iter().any(|(name, _)| name == SEALED) => Err(malformed(
            "a sealed marker beside other header entries: the record was altered",
        )),
        _ => Ok(None),
    }
}

pub(super) fn malformed(what: &str) -> SealError {
    SealError::Malformed(what.to_owned())
}

/// `bytes` as lowercase hex, the form [`aad`] binds (as `ScopedKey::hash_hex` writes it).
pub(super) fn hex(bytes: &[u8]) -> String {
    use core::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// `"idem-record" 0 version key-id 0 key-hash`, then for format 2 and later
/// `0 operation-id 0 request-hash status(u16) state(u8)` (ids, hashes in hex: no 0 byte).
pub(super) fn aad(version: u8, id: &str, key_hash: &str, binding: Option<&Binding>) -> Vec<u8> {
    let mut aad = Vec::with_capacity(160 + id.len() + key_hash.len());
    aad.extend_from_slice(b"idem-record\0");
    aad.push(version);
    aad.extend_from_slice(id.as_bytes());
    aad.push(0);
    aad.extend_from_slice(key_hash.as_bytes());
    if let Some(b) = binding {
        aad.push(0);
        aad.extend_from_slice(b.operation_id.as_bytes());
        aad.push(0);
        aad.extend_from_slice(b.request_hash.to_string().as_bytes());
        aad.extend_from_slice(&b.status.to_be_bytes());
        aad.push(b.state.code() as u8);
    }
    aad
}

/// `u32 headers-blob-len, headers blob, u8 has-biz-no, u32 biz-no-len, biz no, body`.
pub(super) fn encode_plain(c: &Completion) -> Vec<u8> {
    let headers = crate::store::headers::encode_headers(&c.headers);
    let biz = c.biz_no.as_deref().unwrap_or("");
    let mut out = Vec::with_capacity(9 + headers.len() + biz.len() + c.body.len());
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    out.extend_from_slice(&headers);
    out.push(u8::from(c.biz_no.is_some()));
    out.extend_from_slice(&(biz.len() as u32).to_be_bytes());
    out.extend_from_slice(biz.as_bytes());
    out.extend_from_slice(&c.body);
    out
}

type Plain = (Vec<(String, Vec<u8>)>, Option<String>, Vec<u8>);

fn decode_plain(mut b: &[u8]) -> Option<Plain> {
    use crate::store::headers::{take, take_u32};
    let n = take_u32(&mut b)?;
    let headers = crate::store::headers::decode_headers(take(&mut b, n)?)?;
    let has_biz = match take(&mut b, 1)? {
        [0] => false,
        [1] => true,
        _ => return None,
    };
    let n = take_u32(&mut b)?;
    let biz = core::str::from_utf8(take(&mut b, n)?).ok()?.to_owned();
    Some((headers, has_biz.then_some(biz), b.to_vec()))
}
