//! The operator side: a response as its store's columns hold it ([`StoredResponse`]), opened or
//! resealed under the primary key for the `idem` CLI's `inspect` and `rekey`.

use super::format::{Binding, SealError, VERSION, VERSION_1, hex, malformed, sealed_meta};
use super::ring::KeyRing;
use crate::store::{Completion, Outcome, RecordState};

impl KeyRing {
    /// Opens the response of a record read from its store's columns ([`StoredResponse`]),
    /// sealed under any key of the ring or plaintext, for tools that read a store directly (the
    /// `idem` CLI's `inspect`). `key_hash` is the record's (its `key_hash` column).
    ///
    /// A plaintext response opens as it is whatever the ring accepts: a tool reports it
    /// (`sealed_under: None`) and `idem rekey` seals it.
    ///
    /// ```
    /// use idem_runtime::RequestHash;
    /// use idem_runtime::seal::{Binding, KeyRing, StoredResponse};
    /// use idem_runtime::store::RecordState;
    /// // Switching encryption on: the ring seals the plaintext records written before.
    /// let ring = KeyRing::new("k1", [7; 32])?.accepting_plaintext();
    /// let key_hash = [3; 32];
    /// let binding = Binding {
    ///     operation_id: "0f9a1c52-7d4b-4b3e-9d59-6c0c1f0e2a11".to_owned(),
    ///     request_hash: RequestHash::of_bytes(b"the request"),
    ///     status: 201,
    ///     state: RecordState::Completed,
    /// };
    /// let plain = StoredResponse::plain(&[("location", b"/v1/payments/p1")], b"{}", Some("p1"));
    /// let sealed = ring.reseal_stored(&key_hash, &binding, &plain)?.expect("sealed now");
    /// assert_eq!(sealed.sealed_under()?.as_deref(), Some("k1"));
    /// let opened = ring.open_stored(&key_hash, &binding, &sealed)?;
    /// assert_eq!(opened.body, b"{}");
    /// assert_eq!(opened.biz_no.as_deref(), Some("p1"));
    /// // Bound to its record: under another key hash, or with another status, it does not open.
    /// assert!(ring.open_stored(&[4; 32], &binding, &sealed).is_err());
    /// let replayed_as_ok = Binding { status: 200, ..binding };
    /// assert!(ring.open_stored(&key_hash, &replayed_as_ok, &sealed).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A [`SealError`] when it is sealed and does not open, or when its headers column does not
    /// decode ([`SealError::Malformed`]).
    pub fn open_stored(
        &self,
        key_hash: &[u8; 32],
        binding: &Binding,
        stored: &StoredResponse,
    ) -> Result<OpenedResponse, SealError> {
        let headers = stored.decoded_headers()?;
        let hex = hex(key_hash);
        Ok(
            match self.open_parts(&hex, binding, &headers, &stored.body, true)? {
                Some((headers, biz_no, body)) => OpenedResponse {
                    sealed_under: stored.sealed_under()?,
                    headers,
                    body,
                    biz_no,
                },
                None => OpenedResponse {
                    sealed_under: None,
                    headers,
                    body: stored.body.clone(),
                    biz_no: stored.biz_no.clone(),
                },
            },
        )
    }

    /// The business number a remembered record's receipt seals (its business number column,
    /// starting with [`RECEIPT`](super::RECEIPT)), once the purge freed its response: for tools
    /// that read a store directly (the `idem` CLI's `inspect`). `key_hash` is the record's.
    ///
    /// # Errors
    /// A [`SealError`] when it does not open under `binding` (the record was altered), or its
    /// key is not in the ring.
    pub fn open_receipt_stored(
        &self,
        key_hash: &[u8; 32],
        binding: &Binding,
        receipt: &str,
    ) -> Result<Option<String>, SealError> {
        self.open_receipt(&hex(key_hash), binding, receipt)
    }

    /// The same response sealed under the primary key in the current format, for a record read
    /// from its store's columns with its [`Binding`]: what `idem rekey` writes back. A plaintext
    /// response is sealed; one sealed under an older key of the ring, or in format 1, is opened
    /// and sealed again (a new nonce); `None` when it is sealed under the primary in the
    /// current format already. A plaintext or format-1 response is sealed only by a ring that
    /// accepts plaintext ([`KeyRing::accepting_plaintext`]): it binds nothing a database writer
    /// could not have changed, and sealing it would make a forged record replay; otherwise it
    /// is [`SealError::Unsealed`]. A ring that seals nothing ([`KeyRing::sealing_nothing`])
    /// opens every sealed response back to plaintext, and leaves plaintext ones (`None`). See
    /// [`open_stored`](Self::open_stored).
    ///
    /// # Errors
    /// [`ResealError::Open`] when it does not open (nothing may be written over it), or
    /// [`ResealError::Random`] when no nonce could be drawn.
    pub fn reseal_stored(
        &self,
        key_hash: &[u8; 32],
        binding: &Binding,
        stored: &StoredResponse,
    ) -> Result<Option<StoredResponse>, ResealError> {
        if stored.is_freed() {
            return self.reseal_freed(key_hash, binding, stored);
        }
        let sealed = stored.sealed_as()?;
        let primary = (VERSION, self.primary().to_owned());
        let current = match &sealed {
            None => !self.seals,
            // With its receipt under the primary too.
            Some(sealed) => {
                self.seals && *sealed == primary && stored.receipt_as().as_ref() == Some(&primary)
            }
        };
        if current {
            return Ok(None);
        }
        // A plaintext or format-1 record binds nothing a writer could not change: sealing it
        // would make a forged record replay. Only a ring that accepts them (the switch to
        // encryption) seals them.
        if self.seals && !self.accept_plaintext {
            match &sealed {
                None => return Err(SealError::Unsealed("plaintext").into()),
                Some((VERSION_1, _)) => {
                    return Err(SealError::Unsealed("sealed in format 1").into());
                }
                Some(_) => {}
            }
        }
        let opened = self.open_stored(key_hash, binding, stored)?;
        if !self.seals {
            return Ok(Some(StoredResponse {
                headers: crate::store::headers::encode_headers(&opened.headers),
                body: opened.body,
                biz_no: opened.biz_no,
            }));
        }
        let outcome = match binding.state {
            RecordState::FailedStored => Outcome::FailedStored,
            RecordState::Completed | RecordState::Processing => Outcome::Completed,
        };
        let completion = Completion {
            headers: opened.headers,
            body: opened.body,
            biz_no: opened.biz_no,
            ..Completion::new(outcome, binding.status, Vec::new())
        };
        let sealed = self
            .seal(
                &hex(key_hash),
                &binding.operation_id,
                &binding.request_hash,
                &completion,
            )
            .map_err(ResealError::Random)?;
        Ok(Some(StoredResponse {
            headers: crate::store::headers::encode_headers(&sealed.headers),
            body: sealed.body,
            // The receipt under the new primary key.
            biz_no: sealed.biz_no,
        }))
    }
}

impl KeyRing {
    /// [`reseal_stored`](Self::reseal_stored) of a remembered record whose response the purge
    /// freed: only its receipt is left, resealed under the primary key (a rotation), made from
    /// its plaintext business number (by a ring that accepts plaintext, as for a plaintext
    /// response), or opened back to plaintext (a ring that seals nothing). `None` when it is
    /// as it should be already. The columns it returns hold no response (they stay empty).
    fn reseal_freed(
        &self,
        key_hash: &[u8; 32],
        binding: &Binding,
        stored: &StoredResponse,
    ) -> Result<Option<StoredResponse>, ResealError> {
        let hex = hex(key_hash);
        let receipt = stored.receipt_as();
        let primary = (VERSION, self.primary().to_owned());
        let biz_no = match (&receipt, self.seals) {
            (Some(r), true) if *r == primary => return Ok(None),
            (None, false) => return Ok(None),
            (Some(_), _) => {
                self.open_receipt(&hex, binding, stored.biz_no.as_deref().unwrap_or(""))?
            }
            (None, true) if !self.accept_plaintext => {
                return Err(SealError::Unsealed("plaintext").into());
            }
            (None, true) => stored.biz_no.clone(),
        };
        let biz_no = if self.seals {
            Some(
                self.receipt(&hex, binding, biz_no.as_deref())
                    .map_err(ResealError::Random)?,
            )
        } else {
            biz_no
        };
        Ok(Some(StoredResponse {
            headers: Vec::new(),
            body: Vec::new(),
            biz_no,
        }))
    }
}

/// The response of one record as its store's columns hold it: `resp_headers` (idem's
/// length-prefixed blob), `resp_body` and `biz_no` of the SQL tables, the same fields of a
/// Redis hash. For tools that read and rewrite a store directly, as the `idem` CLI's `inspect`
/// and `rekey` do ([`KeyRing::open_stored`], [`KeyRing::reseal_stored`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The `resp_headers` column as stored.
    pub headers: Vec<u8>,
    /// The `resp_body` column: the body, or for a sealed response its nonce and ciphertext.
    pub body: Vec<u8>,
    /// The `biz_no` column: for a sealed response, its receipt ([`RECEIPT`](super::RECEIPT)).
    pub biz_no: Option<String>,
}

impl StoredResponse {
    /// The columns a plaintext response is stored as.
    pub fn plain(headers: &[(&str, &[u8])], body: &[u8], biz_no: Option<&str>) -> Self {
        let headers: Vec<(String, Vec<u8>)> = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
            .collect();
        StoredResponse {
            headers: crate::store::headers::encode_headers(&headers),
            body: body.to_vec(),
            biz_no: biz_no.map(str::to_owned),
        }
    }

    /// The id of the key it is sealed under; `None` for a plaintext response.
    ///
    /// # Errors
    /// [`SealError::Malformed`] when the headers column does not decode, or names a seal of a
    /// format this build does not know.
    pub fn sealed_under(&self) -> Result<Option<String>, SealError> {
        Ok(self.sealed_as()?.map(|(_, id)| id.to_owned()))
    }

    /// Whether the purge freed this response (a remembered record past its TTL): its response
    /// columns are empty, its business number column holds the receipt of a sealed record.
    pub fn is_freed(&self) -> bool {
        self.headers.is_empty() && self.body.is_empty()
    }

    /// The format and key id it is sealed in; `None` for a plaintext response. A freed
    /// response is sealed as its receipt is.
    fn sealed_as(&self) -> Result<Option<(u8, String)>, SealError> {
        if self.is_freed() {
            return Ok(self.receipt_as());
        }
        let headers = self.decoded_headers()?;
        let Some(meta) = sealed_meta(&headers)? else {
            return Ok(None);
        };
        match meta.split_first() {
            Some((&version @ (VERSION | VERSION_1), id)) => {
                Ok(Some((version, String::from_utf8_lossy(id).into_owned())))
            }
            Some((version, _)) => Err(malformed(&format!("format version {version}"))),
            None => Err(malformed("no version")),
        }
    }

    /// The format and key id of the receipt in the business number column, if it holds one.
    fn receipt_as(&self) -> Option<(u8, String)> {
        let rest = self.biz_no.as_deref()?.strip_prefix(super::RECEIPT)?;
        let mut parts = rest.splitn(3, ':');
        let version = parts.next()?.parse().ok()?;
        Some((version, parts.next()?.to_owned()))
    }

    fn decoded_headers(&self) -> Result<Vec<(String, Vec<u8>)>, SealError> {
        crate::store::headers::decode_headers(&self.headers)
            .ok_or_else(|| malformed("a headers column that does not decode"))
    }
}

/// A stored response opened by [`KeyRing::open_stored`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedResponse {
    /// The key it was sealed under; `None` when it was stored in plaintext.
    pub sealed_under: Option<String>,
    /// The whitelisted response headers.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The response body.
    pub body: Vec<u8>,
    /// The business number.
    pub biz_no: Option<String>,
}

/// Why [`KeyRing::reseal_stored`] left a stored response as it is.
#[derive(Debug, thiserror::Error)]
pub enum ResealError {
    /// It does not open: it must not be written over.
    #[error(transparent)]
    Open(#[from] SealError),
    /// The operating system's random generator failed: nothing was sealed.
    #[error("no randomness for a nonce: {0}")]
    Random(getrandom::Error),
}
