//! What `idem` reads of a store: a record as `inspect` shows it ([`Record`]) and as `rekey`
//! rewrites it ([`StoredRow`]), what of its response a key ring opens ([`View`]), the statistics
//! ([`Stats`]), and their JSON (`--json`).
//!
//! The rule: a sealed response is opened by `idem::seal` only (`KeyRing::open_stored`), with
//! what its seal binds read from the record's own columns; one that does not open is shown as
//! such, with why, never guessed at.

use std::borrow::Cow;

use idem::seal::{Binding, KeyRing, OpenedResponse, StoredResponse};
use idem::store::RecordState;
use serde::Serialize;

use crate::time::{as_rfc3339, as_rfc3339_opt};

/// One record as stored; times in ms since the Unix epoch, `now` the database's.
pub(crate) struct Record {
    pub(crate) key: String,
    pub(crate) state: i64,
    pub(crate) fence: i64,
    pub(crate) lease_until: i64,
    pub(crate) expire_at: i64,
    pub(crate) request_hash: String,
    pub(crate) status: Option<i64>,
    pub(crate) biz_no: Option<String>,
    pub(crate) operation_id: String,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) now: i64,
    pub(crate) headers: Option<Vec<u8>>,
    /// A remembered record's end of replays (its TTL), negative once the purge freed the
    /// response; `None` for a record not remembered (replayed until `expire_at`).
    pub(crate) replay_until: Option<i64>,
}

impl Record {
    /// What its seal binds besides the key hash; `None` when a column does not read as the
    /// store writes it.
    fn binding(&self) -> Option<Binding> {
        binding(
            &self.operation_id,
            &self.request_hash,
            self.status,
            self.state,
        )
    }

    /// The stored response columns.
    fn response(&self) -> StoredResponse {
        StoredResponse {
            headers: self.headers.clone().unwrap_or_default(),
            body: self.body.clone().unwrap_or_default(),
            biz_no: self.biz_no.clone(),
        }
    }
}

/// What `inspect` can read of a record's response with the key ring it was given.
pub(crate) struct View {
    /// The key id the response is sealed under; `None` for a plaintext response.
    pub(crate) sealed_under: Option<String>,
    /// The opened response of a sealed record.
    pub(crate) opened: Option<OpenedResponse>,
    /// Why a sealed response was not opened.
    pub(crate) unopened: Option<String>,
}

/// The key id of a receipt (`idem-receipt:<format>:<key id>:..`), if `biz_no` is one.
fn receipt_key(biz_no: &str) -> Option<String> {
    let rest = biz_no.strip_prefix(idem::seal::RECEIPT)?;
    rest.split(':').nth(1).map(str::to_owned)
}

impl View {
    /// A freed remembered record's receipt, opened with `ring` when it can.
    fn of_receipt(record: &Record, key_hash: &[u8], ring: Option<&KeyRing>, id: String) -> View {
        let hash: Option<[u8; 32]> = key_hash.try_into().ok();
        let receipt = record.biz_no.as_deref().unwrap_or_default();
        let opened = match (ring, hash, record.binding()) {
            (None, _, _) => Err(NO_RING.to_owned()),
            (Some(ring), Some(hash), Some(binding)) => ring
                .open_receipt_stored(&hash, &binding, receipt)
                .map_err(|e| e.to_string()),
            (Some(_), None, _) => Err("a key hash that is not 32 bytes".to_owned()),
            (Some(_), _, None) => Err(UNBOUND.to_owned()),
        };
        match opened {
            Ok(biz_no) => View {
                sealed_under: Some(id.clone()),
                opened: Some(OpenedResponse {
                    sealed_under: Some(id),
                    headers: Vec::new(),
                    body: Vec::new(),
                    biz_no,
                }),
                unopened: None,
            },
            Err(why) => View {
                sealed_under: Some(id),
                opened: None,
                unopened: Some(why),
            },
        }
    }

    pub(crate) fn of(record: &Record, key_hash: &[u8], ring: Option<&KeyRing>) -> View {
        if record.headers.is_none() && record.body.is_none() {
            // No response stored (processing), or freed by the purge (remembered): of a sealed
            // record, only its receipt is left, which seals the business number.
            return match record.biz_no.as_deref().and_then(receipt_key) {
                None => View {
                    sealed_under: None,
                    opened: None,
                    unopened: None,
                },
                Some(id) => Self::of_receipt(record, key_hash, ring, id),
            };
        }
        let stored = record.response();
        let hash: Option<[u8; 32]> = key_hash.try_into().ok();
        let sealed_under = match stored.sealed_under() {
            Ok(id) => id,
            Err(e) => {
                return View {
                    sealed_under: None,
                    opened: None,
                    unopened: Some(e.to_string()),
                };
            }
        };
        if sealed_under.is_none() {
            return View {
                sealed_under,
                opened: None,
                unopened: None,
            };
        }
        let (opened, unopened) = match (ring, hash, record.binding()) {
            (None, _, _) => (None, Some(NO_RING.to_owned())),
            (Some(ring), Some(hash), Some(binding)) => {
                match ring.open_stored(&hash, &binding, &stored) {
                    Ok(o) => (Some(o), None),
                    Err(e) => (None, Some(e.to_string())),
                }
            }
            (Some(_), None, _) => (None, Some("a key hash that is not 32 bytes".to_owned())),
            (Some(_), _, None) => (None, Some(UNBOUND.to_owned())),
        };
        View {
            sealed_under,
            opened,
            unopened,
        }
    }
}

/// What a sealed response's binding is made of, from a record's columns: `None` when the
/// request hash is not 64 hex digits, or the status or state out of their ranges.
pub(crate) fn binding(
    operation_id: &str,
    request_hash: &str,
    status: Option<i64>,
    state: i64,
) -> Option<Binding> {
    Some(Binding {
        operation_id: operation_id.to_owned(),
        request_hash: request_hash.trim().parse().ok()?,
        status: u16::try_from(status?).ok()?,
        state: RecordState::from_code(state)?,
    })
}

/// Why a response cannot be opened when the columns its seal binds do not read.
pub(crate) const UNBOUND: &str = "the request hash, status or state column does not read as idem writes it:     the record was altered";

/// What `inspect` says of a sealed response without a key ring.
pub(crate) const NO_RING: &str = "the response is sealed: give the key ring (IDEM_ENCRYPTION_KEYS or \
    --keys-file) to read it";

/// A stored record as `rekey` reads it.
#[derive(sqlx::FromRow)]
pub(crate) struct StoredRow {
    pub(crate) key_hash: Vec<u8>,
    pub(crate) idem_key: String,
    /// The `request_hash`, `resp_status` and `state` columns: with the operation id, what the
    /// seal binds.
    pub(crate) request_hash: String,
    pub(crate) resp_status: Option<i64>,
    pub(crate) state: i64,
    /// The operation the response belongs to: with `rev`, the guard of the rewrite (a record
    /// purged and claimed afresh restarts `rev` at 1, under a new operation id).
    pub(crate) operation_id: String,
    /// The row version, +1 on every write: the guard of the rewrite.
    pub(crate) rev: i64,
    pub(crate) resp_headers: Option<Vec<u8>>,
    pub(crate) resp_body: Option<Vec<u8>>,
    pub(crate) biz_no: Option<String>,
}

/// `inspect --json`.
#[derive(Serialize)]
pub(crate) struct RecordJson<'a> {
    key: &'a str,
    key_hash: &'a str,
    state: &'static str,
    expired: bool,
    /// Past its TTL, within its remember window: answered `410 key-expired`.
    remembered: bool,
    fence: i64,
    operation_id: &'a str,
    #[serde(serialize_with = "as_rfc3339")]
    lease_until: i64,
    #[serde(serialize_with = "as_rfc3339")]
    expire_at: i64,
    /// When a remembered record's response expired, or expires (its TTL).
    #[serde(serialize_with = "as_rfc3339_opt")]
    replay_until: Option<i64>,
    /// Whether the purge freed a remembered record's response.
    response_freed: bool,
    #[serde(serialize_with = "as_rfc3339")]
    created_at: i64,
    #[serde(serialize_with = "as_rfc3339")]
    updated_at: i64,
    request_hash: &'a str,
    status: Option<i64>,
    biz_no: Option<&'a str>,
    /// The key id its response is sealed under; `None` for a plaintext response.
    sealed_under: Option<&'a str>,
    /// For a sealed response, why it could not be read: no key ring given, or the error.
    unopened: Option<String>,
    body_len: usize,
    /// With `--body` only.
    body: Option<Cow<'a, str>>,
}

impl Record {
    pub(crate) fn expired(&self) -> bool {
        self.expire_at <= self.now
    }

    /// When a remembered record's response expires (its TTL); `None` when not remembered. A
    /// value outside the record's life is a stale one (left by a build from before
    /// `remember` that replaced the record): not this record's, as the stores read it.
    pub(crate) fn replay_until(&self) -> Option<i64> {
        self.replay_until
            .map(i64::abs)
            .filter(|t| self.created_at < *t && *t <= self.expire_at)
    }

    /// Past its TTL and within its remember window, stored: answered `410 key-expired`.
    pub(crate) fn remembered(&self) -> bool {
        self.state != 0
            && !self.expired()
            && (self.response_freed() || self.replay_until().is_some_and(|t| t <= self.now))
    }

    /// Whether the purge freed its response (a remembered record past its TTL).
    pub(crate) fn response_freed(&self) -> bool {
        self.replay_until().is_some() && self.replay_until.is_some_and(|t| t < 0)
    }

    pub(crate) fn json<'a>(
        &'a self,
        key_hash: &'a str,
        with_body: bool,
        view: &'a View,
    ) -> RecordJson<'a> {
        let (biz_no, body) = match &view.opened {
            Some(o) => (o.biz_no.as_deref(), Some(&o.body)),
            None if view.sealed_under.is_some() => (None, None),
            None => (self.biz_no.as_deref(), self.body.as_ref()),
        };
        RecordJson {
            key: &self.key,
            key_hash,
            state: state_name(self.state),
            expired: self.expired(),
            remembered: self.remembered(),
            fence: self.fence,
            operation_id: &self.operation_id,
            lease_until: self.lease_until,
            expire_at: self.expire_at,
            replay_until: self.replay_until(),
            response_freed: self.response_freed(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            request_hash: self.request_hash.trim(),
            status: self.status,
            biz_no,
            sealed_under: view.sealed_under.as_deref(),
            unopened: view.unopened.clone(),
            body_len: body.map_or(0, Vec::len),
            body: body
                .filter(|_| with_body)
                .map(|b| String::from_utf8_lossy(b)),
        }
    }
}

/// What `stats` shows; `stats --json` as it is.
#[derive(Serialize)]
pub(crate) struct Stats {
    pub(crate) processing: i64,
    pub(crate) completed: i64,
    pub(crate) failed_stored: i64,
    pub(crate) expired: i64,
    /// Stored records past their TTL and within their remember window (`remember`).
    pub(crate) remembered: i64,
    pub(crate) oldest_processing: Option<Oldest>,
    pub(crate) expiring_1h: i64,
    pub(crate) expiring_1d: i64,
    pub(crate) table_bytes: Option<i64>,
    pub(crate) index_bytes: Option<i64>,
}

/// The oldest live processing record.
#[derive(Serialize)]
pub(crate) struct Oldest {
    pub(crate) key_hash: String,
    #[serde(serialize_with = "as_rfc3339")]
    pub(crate) locked_at: i64,
    /// The database's clock, for the relative time.
    #[serde(skip)]
    pub(crate) now: i64,
}

pub(crate) fn state_name(state: i64) -> &'static str {
    match state {
        0 => "processing",
        1 => "completed",
        2 => "failed-stored",
        _ => "unknown",
    }
}
