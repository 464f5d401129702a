//! Rows and parameters: the columns every SQL backend reads, the checked conversion of a raw row
//! into a [`Record`], and the integer parameters the statements bind.

use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::fingerprint::RequestHash;
use crate::store::clock::Timestamp;
use crate::store::error::StoreError;
use crate::store::headers::decode_headers;
use crate::store::interface::{Record, RecordState, valid_replay_until};

/// The columns every SQL backend reads, in [`RawRecord`] order. A macro only so that the
/// backends' statements can be `concat!`ed at compile time; it expands to a string literal and
/// depends on nothing at its call site.
macro_rules! record_columns {
    () => {
        "idem_key, request_hash, state, operation_id, fence, rev, \
         resp_status, resp_headers, resp_body, biz_no, locked_at, lease_until, expire_at, \
         created_at, updated_at, completed_at, replay_until"
    };
}
pub(crate) use record_columns;

/// A row as the SQL backends read it, before validation.
pub(crate) struct RawRecord {
    pub idem_key: String,
    pub request_hash: String,
    pub state: i64,
    pub operation_id: String,
    pub fence: i64,
    /// Row version (+1 on every write); only the MySQL claim reads it (compare-and-swap).
    pub rev: i64,
    pub resp_status: Option<i64>,
    pub resp_headers: Option<Vec<u8>>,
    pub resp_body: Option<Vec<u8>>,
    pub biz_no: Option<String>,
    pub locked_at: i64,
    pub lease_until: i64,
    pub expire_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
    /// A remembered record's end of replays (`NULL`: `expire_at`), negated once the purge freed
    /// its response.
    pub replay_until: Option<i64>,
    /// The database's "now" when the row was read (or the store's clock override), in the
    /// column after `record_columns!()`: every decision about the row is taken against it.
    pub db_now: i64,
}

impl RawRecord {
    /// Reads the `record_columns!()` of `row`, the first at index `first`, and the database's "now"
    /// right after them. `S` and `T` are the integer
    /// types the backend's columns `state` and `resp_status` decode to.
    pub(crate) fn read<'r, R, S, T>(row: &'r R, first: usize) -> Result<Self, sqlx::Error>
    where
        R: Row,
        usize: ColumnIndex<R>,
        S: Into<i64> + Decode<'r, R::Database> + Type<R::Database>,
        T: Into<i64> + Decode<'r, R::Database> + Type<R::Database>,
        i64: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(RawRecord {
            idem_key: row.try_get(first)?,
            request_hash: row.try_get(first + 1)?,
            state: row.try_get::<S, _>(first + 2)?.into(),
            operation_id: row.try_get(first + 3)?,
            fence: row.try_get(first + 4)?,
            rev: row.try_get(first + 5)?,
            resp_status: row.try_get::<Option<T>, _>(first + 6)?.map(Into::into),
            resp_headers: row.try_get(first + 7)?,
            resp_body: row.try_get(first + 8)?,
            biz_no: row.try_get(first + 9)?,
            locked_at: row.try_get(first + 10)?,
            lease_until: row.try_get(first + 11)?,
            expire_at: row.try_get(first + 12)?,
            created_at: row.try_get(first + 13)?,
            updated_at: row.try_get(first + 14)?,
            completed_at: row.try_get(first + 15)?,
            replay_until: row.try_get(first + 16)?,
            db_now: row.try_get(first + 17)?,
        })
    }

    /// Validates the row: known state, 64-hex request hash, well-formed headers.
    pub(crate) fn into_stored(self) -> Result<Stored, StoreError> {
        let (rev, now) = (self.rev, Timestamp::from_millis(self.db_now));
        Ok(Stored {
            record: self.into_record()?,
            rev,
            now,
        })
    }

    fn into_record(self) -> Result<Record, StoreError> {
        let key = self.idem_key;
        // Named by the failing call's key hash in its logs, never by this readable key.
        let bad = |detail: String| StoreError::corrupt(None, detail);
        let state = RecordState::from_code(self.state)
            .ok_or_else(|| bad(format!("unknown state {}", self.state)))?;
        let request_hash: RequestHash = self
            .request_hash
            .trim_end()
            .parse()
            .map_err(|e| bad(format!("request_hash: {e}")))?;
        let fence = u64::try_from(self.fence).map_err(|_| bad(format!("fence {}", self.fence)))?;
        let status = match self.resp_status {
            None => None,
            Some(s) => Some(
                u16::try_from(s)
                    .ok()
                    .filter(|s| (100..=999).contains(s))
                    .ok_or_else(|| bad(format!("response status {s}")))?,
            ),
        };
        let headers = match self.resp_headers {
            None => Vec::new(),
            Some(h) => decode_headers(&h).ok_or_else(|| bad("malformed headers".to_owned()))?,
        };
        if state != RecordState::Processing && status.is_none() {
            return Err(bad(format!("{state:?} without a response status")));
        }
        Ok(Record {
            key,
            request_hash,
            state,
            operation_id: self.operation_id,
            fence,
            status,
            headers,
            body: self.resp_body.unwrap_or_default(),
            biz_no: self.biz_no,
            locked_at: Timestamp::from_millis(self.locked_at),
            lease_until: Timestamp::from_millis(self.lease_until),
            expire_at: Timestamp::from_millis(self.expire_at),
            replay_until: valid_replay_until(self.replay_until, self.created_at, self.expire_at),
            created_at: Timestamp::from_millis(self.created_at),
            updated_at: Timestamp::from_millis(self.updated_at),
            completed_at: self.completed_at.map(Timestamp::from_millis),
        })
    }
}

/// A record as read from the database, with what the decisions about it need.
#[derive(Debug)]
pub(crate) struct Stored {
    pub record: Record,
    /// Row version (+1 on every write); the MySQL takeover's compare-and-swap checks it.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub rev: i64,
    /// The database's clock (or the store's override) when the row was read.
    pub now: Timestamp,
}

/// Fence as the `BIGINT` column stores it.
pub(crate) fn fence_param(fence: u64) -> Result<i64, StoreError> {
    i64::try_from(fence).map_err(|_| StoreError::Invalid(format!("fence {fence} out of range")))
}

/// Milliseconds of a duration as a `BIGINT` parameter.
pub(crate) fn millis_param(d: core::time::Duration) -> i64 {
    crate::store::clock::duration_millis(d)
}
