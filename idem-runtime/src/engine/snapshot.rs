//! [`Snapshot`]: a response body that carries its business number (S11).

/// A response body type that carries the business number (`biz_no`) callers use to query, ship
/// and reconcile (S11). Derive it with `#[derive(idem::Snapshot)]` and mark the field
/// `#[snapshot(biz_no)]`, or implement it by hand:
///
/// ```
/// use idem_runtime::engine::Snapshot;
/// #[derive(serde::Serialize)]
/// struct Payment { id: String, amount: u64 }
/// impl Snapshot for Payment {
///     const BIZ_NO_FIELD: &'static str = "id";
///     fn biz_no(&self) -> String { self.id.clone() }
/// }
/// let p = Payment { id: "pay_1".into(), amount: 100 };
/// assert_eq!((Payment::BIZ_NO_FIELD, p.biz_no()), ("id", "pay_1".to_owned()));
/// ```
///
/// The engine uses it three ways: it stores the business number beside the snapshot; a
/// `suppress_only` replay answers `{"<BIZ_NO_FIELD>": "<biz_no>"}`; a body over the snapshot size
/// limit is stored as its key fields — the business number and the fields
/// [`Snapshot::key_fields`] names (`#[snapshot(key)]`) — and rebuilt from them on replay, never
/// as a bare "ok" (S12).
#[diagnostic::on_unimplemented(
    message = "`{Self}` carries no business number (biz_no)",
    note = "a replay without the business number sends callers into an 'order again' branch (rule S11 of docs/contract.md in idem's repository): derive `idem::Snapshot` on the response body and mark the id field `#[snapshot(biz_no)]`, or implement `idem::Snapshot`"
)]
pub trait Snapshot {
    /// The wire name of the business number field (after serde renames).
    const BIZ_NO_FIELD: &'static str;

    /// The business number of this response.
    fn biz_no(&self) -> String;

    /// The fields besides the business number that a snapshot over the size limit keeps, as
    /// `(wire name, JSON value)` (`#[snapshot(key)]` fields; none by default).
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }

    /// A response holding the business number and nothing else, for a replay that has only the
    /// business number to answer with (a `suppress_only` replay, a snapshot over the size limit)
    /// on a front whose responses are typed messages (gRPC); `None`, the default, when the type
    /// cannot be built from it alone. The impls for `&T`, `Box<T>` and `Arc<T>` return `None`.
    ///
    /// `#[derive(Snapshot)]` implements it for prost messages, every field of which has a default
    /// (proto3 has no required fields), as
    /// `Some(Self { <biz_no field>: biz_no.into(), ..Default::default() })`:
    ///
    /// ```
    /// use idem_runtime::engine::Snapshot;
    /// #[derive(Default)]
    /// struct Payment { id: String, amount_minor: i64 }
    /// impl Snapshot for Payment {
    ///     const BIZ_NO_FIELD: &'static str = "id";
    ///     fn biz_no(&self) -> String { self.id.clone() }
    ///     fn from_biz_no(biz_no: &str) -> Option<Self> {
    ///         Some(Payment { id: biz_no.into(), ..Default::default() })
    ///     }
    /// }
    /// let replayed = Payment::from_biz_no("pay_1").unwrap();
    /// assert_eq!((replayed.id.as_str(), replayed.amount_minor), ("pay_1", 0));
    /// ```
    fn from_biz_no(biz_no: &str) -> Option<Self>
    where
        Self: Sized,
    {
        let _ = biz_no;
        None
    }
}

impl<T: Snapshot + ?Sized> Snapshot for &T {
    const BIZ_NO_FIELD: &'static str = T::BIZ_NO_FIELD;
    fn biz_no(&self) -> String {
        (**self).biz_no()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        (**self).key_fields()
    }
}

impl<T: Snapshot + ?Sized> Snapshot for Box<T> {
    const BIZ_NO_FIELD: &'static str = T::BIZ_NO_FIELD;
    fn biz_no(&self) -> String {
        (**self).biz_no()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        (**self).key_fields()
    }
}

impl<T: Snapshot + ?Sized> Snapshot for std::sync::Arc<T> {
    const BIZ_NO_FIELD: &'static str = T::BIZ_NO_FIELD;
    fn biz_no(&self) -> String {
        (**self).biz_no()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        (**self).key_fields()
    }
}

/// The minimal JSON object `{"<field>": <biz_no>}` of a `suppress_only` replay, the business
/// number with the JSON type of the first answer (see `http::snapshot::typed_biz_no`).
#[cfg(any(feature = "axum", feature = "actix"))]
pub(crate) fn biz_no_body(field: &str, biz_no: serde_json::Value) -> Vec<u8> {
    key_fields_body(field, biz_no, &[])
}

/// The body stored for a snapshot over the size limit (S12): the key fields and the business
/// number, `{"<key>": .., "<field>": <biz_no>}`.
#[cfg(any(feature = "axum", feature = "actix"))]
pub(crate) fn key_fields_body(
    field: &str,
    biz_no: serde_json::Value,
    key_fields: &[(&'static str, serde_json::Value)],
) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    for (name, value) in key_fields {
        map.insert((*name).to_owned(), value.clone());
    }
    map.insert(field.to_owned(), biz_no);
    serde_json::to_vec(&map).unwrap_or_else(|_| b"{}".to_vec())
}

/// The largest business number every store keeps, sealed or not: MariaDB/MySQL's `TEXT`
/// holds 65,535 bytes, and a handle that seals (`Idem::with_encryption`) writes the business
/// number's receipt there instead, about 4/3 of it plus a key id; 16 KiB leaves it room.
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
const MAX_BIZ_NO_BYTES: usize = 16_384;

/// `biz_no` if every store can keep it: not over [`MAX_BIZ_NO_BYTES`], no U+0000 (which
/// PostgreSQL's `TEXT` refuses). Otherwise the completion would fail on every attempt on that
/// backend (the result never stored, retries answered `409`, then the handler run again after
/// each lease), for a business number echoed from a client's input. Left out on every backend
/// alike, the snapshot is stored without it and replayed exactly (a `suppress_only` or
/// `latest_state` replay of a record without one is exact too).
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) fn storable(biz_no: String) -> Option<String> {
    if biz_no.len() <= MAX_BIZ_NO_BYTES && !biz_no.contains('\0') {
        return Some(biz_no);
    }
    tracing::warn!(
        target: "idem",
        bytes = biz_no.len(),
        "a business number over 16 KiB or holding U+0000 cannot be stored by every backend \
         (sealed or not): the snapshot is stored without it"
    );
    None
}

/// Response headers (and gRPC metadata) never stored nor replayed, even if listed in
/// `replay_headers`: credentials, hop-by-hop headers, and `content-length` (recomputed from the
/// replayed body).
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) const NEVER_STORED: &[&str] = &[
    "set-cookie",
    "authorization",
    "proxy-authenticate",
    "proxy-authorization",
    "www-authenticate",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// `name` (any case) is one of [`NEVER_STORED`].
#[cfg(any(feature = "axum", feature = "actix", feature = "tonic"))]
pub(crate) fn never_stored(name: &str) -> bool {
    NEVER_STORED.iter().any(|n| n.eq_ignore_ascii_case(name))
}
