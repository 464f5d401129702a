//! [`IntoSnapshot`]: the response side of an idempotent handler.

use axum::response::IntoResponse;
use http::{HeaderMap, StatusCode};

use super::json::Json;
use crate::engine::Snapshot;

/// The response side of an idempotent handler: its HTTP response and its business number (S11).
///
/// Implemented for JSON bodies of [`Snapshot`] types ([`SnapshotBody`]: `axum::Json<T>` and
/// `idem::axum::Json<T>`) alone or after a `StatusCode`, a `HeaderMap` or an array of header
/// pairs (`(StatusCode, Json<T>)`, `(StatusCode, HeaderMap, Json<T>)`, `([(K, V); N], Json<T>)`,
/// `(StatusCode, [(K, V); N], Json<T>)`, `(HeaderMap, Json<T>)`), and for `Result<A, E>` where
/// `A: IntoSnapshot` and `E: IntoResponse` (an `Err` has no business number).
///
/// ```
/// use axum::{Json, http::StatusCode};
/// use idem_runtime::engine::Snapshot;
/// use idem_runtime::axum::IntoSnapshot;
///
/// #[derive(serde::Serialize)]
/// struct Order { order_no: String }
/// impl Snapshot for Order {
///     const BIZ_NO_FIELD: &'static str = "order_no";
///     fn biz_no(&self) -> String { self.order_no.clone() }
/// }
///
/// let ok: Result<(StatusCode, Json<Order>), StatusCode> =
///     Ok((StatusCode::CREATED, Json(Order { order_no: "o-1".into() })));
/// assert_eq!(ok.biz_no().as_deref(), Some("o-1"));
/// assert_eq!(<Result<(StatusCode, Json<Order>), StatusCode>>::biz_no_field(), "order_no");
/// let err: Result<(StatusCode, Json<Order>), StatusCode> = Err(StatusCode::BAD_REQUEST);
/// assert_eq!(err.biz_no(), None);
/// ```
#[diagnostic::on_unimplemented(
    message = "the response type `{Self}` carries no business number (biz_no)",
    note = "a replay without the business number sends callers into an 'order again' branch (rule S11 of docs/contract.md in idem's repository): derive `idem::Snapshot` on the response body and mark the id field `#[snapshot(biz_no)]`, or implement `idem::axum::IntoSnapshot`",
    note = "supported shapes: `Json<T>`, `(StatusCode, Json<T>)`, `(StatusCode, HeaderMap, Json<T>)`, `([(K, V); N], Json<T>)`, `(StatusCode, [(K, V); N], Json<T>)`, and `Result<Shape, E: IntoResponse>`"
)]
pub trait IntoSnapshot: IntoResponse {
    /// The business number of this response; `None` for error responses.
    fn biz_no(&self) -> Option<String>;

    /// The wire name of the business number field, used for `suppress_only` replays and
    /// truncated snapshots.
    fn biz_no_field() -> &'static str;

    /// The key fields a snapshot over the size limit keeps besides the business number
    /// ([`Snapshot::key_fields`]); none for error responses.
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
}

/// A response body carrying a business number: `axum::Json<T>` and [`Json<T>`] for
/// `T: Snapshot + Serialize`. Implement it for other body wrappers to use them in
/// [`IntoSnapshot`]'s tuple shapes.
///
/// ```
/// use idem_runtime::engine::Snapshot;
/// use idem_runtime::axum::SnapshotBody;
/// #[derive(serde::Serialize)]
/// struct Refund { refund_id: u64 }
/// impl Snapshot for Refund {
///     const BIZ_NO_FIELD: &'static str = "refund_id";
///     fn biz_no(&self) -> String { self.refund_id.to_string() }
/// }
/// let body = axum::Json(Refund { refund_id: 9 });
/// assert_eq!(SnapshotBody::biz_no(&body), "9");
/// assert_eq!(<axum::Json<Refund> as SnapshotBody>::FIELD, "refund_id");
/// ```
pub trait SnapshotBody: IntoResponse {
    /// The wire name of the business number field.
    const FIELD: &'static str;
    /// The business number.
    fn biz_no(&self) -> String;
    /// The key fields kept by a snapshot over the size limit ([`Snapshot::key_fields`]).
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
}

impl<T: Snapshot> SnapshotBody for axum::Json<T>
where
    Self: IntoResponse,
{
    const FIELD: &'static str = T::BIZ_NO_FIELD;
    fn biz_no(&self) -> String {
        self.0.biz_no()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.0.key_fields()
    }
}

impl<T: Snapshot> SnapshotBody for Json<T>
where
    Self: IntoResponse,
{
    const FIELD: &'static str = T::BIZ_NO_FIELD;
    fn biz_no(&self) -> String {
        self.0.biz_no()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.0.key_fields()
    }
}

impl<T: Snapshot> IntoSnapshot for axum::Json<T>
where
    Self: IntoResponse,
{
    fn biz_no(&self) -> Option<String> {
        Some(SnapshotBody::biz_no(self))
    }
    fn biz_no_field() -> &'static str {
        T::BIZ_NO_FIELD
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        SnapshotBody::key_fields(self)
    }
}

impl<T: Snapshot> IntoSnapshot for Json<T>
where
    Self: IntoResponse,
{
    fn biz_no(&self) -> Option<String> {
        Some(SnapshotBody::biz_no(self))
    }
    fn biz_no_field() -> &'static str {
        T::BIZ_NO_FIELD
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        SnapshotBody::key_fields(self)
    }
}

macro_rules! tuple_snapshot {
    ([$($gen:tt)*] $ty:ty, $idx:tt) => {
        impl<$($gen)*> IntoSnapshot for $ty
        where
            B: SnapshotBody,
            Self: IntoResponse,
        {
            fn biz_no(&self) -> Option<String> {
                Some(SnapshotBody::biz_no(&self.$idx))
            }
            fn biz_no_field() -> &'static str {
                B::FIELD
            }
            fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
                SnapshotBody::key_fields(&self.$idx)
            }
        }
    };
}

tuple_snapshot!([B](StatusCode, B), 1);
tuple_snapshot!([B](HeaderMap, B), 1);
tuple_snapshot!([K, V, B, const N: usize] ([(K, V); N], B), 1);
tuple_snapshot!([B](StatusCode, HeaderMap, B), 2);
tuple_snapshot!([K, V, B, const N: usize] (StatusCode, [(K, V); N], B), 2);

impl<A: IntoSnapshot, E: IntoResponse> IntoSnapshot for Result<A, E> {
    fn biz_no(&self) -> Option<String> {
        self.as_ref().ok().and_then(IntoSnapshot::biz_no)
    }
    fn biz_no_field() -> &'static str {
        A::biz_no_field()
    }
    fn key_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.as_ref()
            .map(IntoSnapshot::key_fields)
            .unwrap_or_default()
    }
}
