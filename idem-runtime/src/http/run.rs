//! [`run`] and [`run_latest`]: the body of every `#[idempotent]` axum handler, reached by the
//! generated code through `__private` (not a public API: the attribute is).

use core::future::Future;
use core::marker::PhantomData;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use http::StatusCode;

use super::context::{IdemContext, KeySource};
use super::respond::{
    SnapshotRules, exact_replay, mark_replayed, mark_unprotected, settle, suppressed_replay,
};
use super::snapshot::IntoSnapshot;
use crate::engine::{
    Atomic, ClaimSettings, Contract, Front, HandlerConfig, Idem, IdempotencyError, Settlement,
    execute,
};
use crate::fingerprint::RequestHash;
use crate::key::ScopePart;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
use crate::store::AtomicMode;
use crate::store::{Record, RecordState};

/// Runs an `exact_replay` or `suppress_only` handler for a key (and scope) until one result is
/// stored, and replays that result to every later request with the key.
///
/// `hash` must be computed **before** the handler runs (a handler that mutates its input must not
/// change what was claimed). The steps and the answers, all problem+json (`docs/http.md`):
///
/// | situation | answer |
/// |---|---|
/// | key missing | `400` `missing-key` |
/// | key empty, > 255 characters, control characters, neither sf-string nor bare | `400` `invalid-key` |
/// | fresh key (or an ended lease of the same request taken over) | the handler runs; its response is stored, stored as a failure, released or abandoned per the [`OutcomePolicy`](crate::engine::OutcomePolicy) |
/// | the handler runs past its timeout | `503` `timed-out` + `Retry-After`; the record is kept with its operation id for the retry |
/// | completed, same request hash | replay, `Idempotent-Replayed: true` (exact: stored status, whitelisted headers, body; suppress_only: `200` + `{"<biz_no_field>": "<biz_no>"}`) |
/// | completed or processing, other request hash | `422` `key-reused` |
/// | processing, same request hash | `409` `in-progress` + `Retry-After` |
/// | store unavailable | `503` `store-unavailable` + `Retry-After`, handler not run; with `fail_open` the handler runs unprotected (`Idempotency-Status: unprotected`) |
///
/// A `latest_state` configuration passed to `run` (which has no lookup) replays exactly.
///
/// The returned future borrows nothing from `key` and `scope`: both are read when `run` is called.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use axum::{Json, http::StatusCode, response::Response};
/// use idem_runtime::engine::{Contract, HandlerConfig, Idem, Snapshot};
/// use idem_runtime::__private::run;
/// use idem_runtime::http::{IdemContext, KeySource};
/// use idem_runtime::RequestHash;
///
/// #[derive(serde::Serialize)]
/// struct Refund { refund_id: String }
/// impl Snapshot for Refund {
///     const BIZ_NO_FIELD: &'static str = "refund_id";
///     fn biz_no(&self) -> String { self.refund_id.clone() }
/// }
/// static REFUND: HandlerConfig = HandlerConfig::new("refunds::create").contract(Contract::SuppressOnly);
///
/// async fn refund(cx: IdemContext, tenant: String) -> Response {
///     let hash = RequestHash::of_bytes(br#"{"payment":"pay_1"}"#);
///     run(cx, &REFUND, KeySource::Header("Idempotency-Key"), &[&tenant], hash, async {
///         (StatusCode::CREATED, Json(Refund { refund_id: "re_1".into() }))
///     })
///     .await
/// }
///
/// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
/// let cx = || {
///     let (parts, ()) = http::Request::post("/refunds").header("idempotency-key", "k1")
///         .body(()).unwrap().into_parts();
///     IdemContext::new(idem.clone(), &parts)
/// };
/// assert_eq!(refund(cx(), "acme".into()).await.status(), StatusCode::CREATED);
/// let replay = refund(cx(), "acme".into()).await;
/// assert_eq!(replay.status(), StatusCode::OK); // suppress_only
/// let body = http_body_util::BodyExt::collect(replay.into_body()).await.unwrap().to_bytes();
/// assert_eq!(&body[..], br#"{"refund_id":"re_1"}"#);
/// # });
/// ```
pub fn run<R, F>(
    cx: IdemContext,
    cfg: &'static HandlerConfig,
    key: KeySource<'_>,
    scope: &[&dyn ScopePart],
    hash: RequestHash,
    handler: F,
) -> impl Future<Output = Response> + use<R, F>
where
    F: Future<Output = R> + Send,
    R: IntoSnapshot + Send,
{
    run_with(cx, cfg, key, scope, hash, handler, NoLookup, None)
}

/// Runs a `latest_state` handler for a key (and scope) until one result is stored; a replay
/// answers with the **current** state of the operation: `lookup(biz_no)` with the stored
/// business number.
///
/// Everything else is as in [`run`]. A replay whose `lookup` answers 2xx is sent as `200`; any
/// other status of `lookup` (the resource is gone: `404`) is sent as it is. Both carry
/// `Idempotent-Replayed: true`. A stored record without a business number (a failure kept by a
/// custom policy) is replayed exactly.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::{Arc, Mutex};
/// use axum::{Json, http::StatusCode, response::Response};
/// use idem_runtime::engine::{Contract, HandlerConfig, Idem, Snapshot};
/// use idem_runtime::__private::run_latest;
/// use idem_runtime::http::{IdemContext, KeySource};
/// use idem_runtime::RequestHash;
///
/// #[derive(Clone, serde::Serialize)]
/// struct Order { order_no: String, status: &'static str }
/// impl Snapshot for Order {
///     const BIZ_NO_FIELD: &'static str = "order_no";
///     fn biz_no(&self) -> String { self.order_no.clone() }
/// }
/// static PLACE: HandlerConfig = HandlerConfig::new("orders::place").contract(Contract::LatestState);
///
/// let db = Arc::new(Mutex::new(None::<Order>));
/// let place = |cx: IdemContext| {
///     let db = db.clone();
///     let db2 = db.clone();
///     run_latest(cx, &PLACE, KeySource::Header("Idempotency-Key"), &[], RequestHash::of_bytes(b"{}"),
///         async move {
///             let order = Order { order_no: "o-1".into(), status: "placed" };
///             *db.lock().unwrap() = Some(order.clone());
///             (StatusCode::CREATED, Json(order))
///         },
///         move |order_no: String| async move {
///             let order = db2.lock().unwrap().clone().filter(|o| o.order_no == order_no);
///             order.map(Json).ok_or(StatusCode::NOT_FOUND)
///         })
/// };
/// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
/// let cx = || {
///     let (parts, ()) = http::Request::post("/orders").header("idempotency-key", "k")
///         .body(()).unwrap().into_parts();
///     IdemContext::new(idem.clone(), &parts)
/// };
/// assert_eq!(place(cx()).await.status(), StatusCode::CREATED);
/// db.lock().unwrap().as_mut().unwrap().status = "shipped";
/// let replay = place(cx()).await;
/// assert_eq!(replay.status(), StatusCode::OK);
/// let body = http_body_util::BodyExt::collect(replay.into_body()).await.unwrap().to_bytes();
/// assert_eq!(&body[..], br#"{"order_no":"o-1","status":"shipped"}"#);
/// # });
/// ```
pub fn run_latest<R, F, L, LF, LR>(
    cx: IdemContext,
    cfg: &'static HandlerConfig,
    key: KeySource<'_>,
    scope: &[&dyn ScopePart],
    hash: RequestHash,
    handler: F,
    lookup: L,
) -> impl Future<Output = Response> + use<R, F, L, LF, LR>
where
    F: Future<Output = R> + Send,
    R: IntoSnapshot + Send,
    L: FnOnce(String) -> LF + Send,
    LF: Future<Output = LR> + Send,
    LR: IntoResponse,
{
    run_with(cx, cfg, key, scope, hash, handler, Lookup(lookup), None)
}

/// [`run`] in the atomic mode (`#[idempotent(transaction = tx)]`): the transaction of `hook`'s
/// slot begins after the claim, and the result commits in it with the handler's rows.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub fn run_atomic<R, F>(
    cx: IdemContext,
    cfg: &'static HandlerConfig,
    key: KeySource<'_>,
    scope: &[&dyn ScopePart],
    hash: RequestHash,
    hook: AtomicMode,
    handler: F,
) -> impl Future<Output = Response> + use<R, F>
where
    F: Future<Output = R> + Send,
    R: IntoSnapshot + Send,
{
    run_with(cx, cfg, key, scope, hash, handler, NoLookup, Some(hook.0))
}

/// [`run_latest`] in the atomic mode (see [`run_atomic`]).
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[allow(clippy::too_many_arguments)]
pub fn run_latest_atomic<R, F, L, LF, LR>(
    cx: IdemContext,
    cfg: &'static HandlerConfig,
    key: KeySource<'_>,
    scope: &[&dyn ScopePart],
    hash: RequestHash,
    hook: AtomicMode,
    handler: F,
    lookup: L,
) -> impl Future<Output = Response> + use<R, F, L, LF, LR>
where
    F: Future<Output = R> + Send,
    R: IntoSnapshot + Send,
    L: FnOnce(String) -> LF + Send,
    LF: Future<Output = LR> + Send,
    LR: IntoResponse,
{
    run_with(
        cx,
        cfg,
        key,
        scope,
        hash,
        handler,
        Lookup(lookup),
        Some(hook.0),
    )
}

/// Every `run` function: the handler's front with its replayer and, in the atomic mode, its
/// transaction.
#[allow(clippy::too_many_arguments)]
fn run_with<R, F, Rp>(
    cx: IdemContext,
    cfg: &'static HandlerConfig,
    key: KeySource<'_>,
    scope: &[&dyn ScopePart],
    hash: RequestHash,
    handler: F,
    lookup: Rp,
    atomic: Option<Arc<dyn Atomic>>,
) -> impl Future<Output = Response> + use<R, F, Rp>
where
    F: Future<Output = R> + Send,
    R: IntoSnapshot + Send,
    Rp: Replayer,
{
    let key = cx.key(key, cfg.operation, scope);
    async move {
        let front = Handler {
            idem: cx.idem(),
            cfg,
            lookup,
            atomic,
            _out: PhantomData::<fn() -> R>,
        };
        execute(cx.idem(), ClaimSettings::of(cfg), key, hash, front, handler).await
    }
}

/// How a handler's replays are built: exactly (or suppressed), or through a lookup of the
/// current state.
trait Replayer: Send {
    fn replay(
        self,
        record: Record,
        contract: Contract,
        biz_no_field: &'static str,
    ) -> impl Future<Output = Response> + Send;
}

/// `run`: stored responses only.
struct NoLookup;

impl Replayer for NoLookup {
    async fn replay(self, record: Record, contract: Contract, field: &'static str) -> Response {
        match contract {
            Contract::SuppressOnly => suppressed_replay(record, field),
            Contract::ExactReplay | Contract::LatestState => exact_replay(record),
        }
    }
}

/// `run_latest`: the current state, rendered by the handler's `lookup`.
struct Lookup<L>(L);

impl<L, LF, LR> Replayer for Lookup<L>
where
    L: FnOnce(String) -> LF + Send,
    LF: Future<Output = LR> + Send,
    LR: IntoResponse,
{
    async fn replay(self, record: Record, _: Contract, _: &'static str) -> Response {
        latest_replay(record, self.0).await
    }
}

/// The front of an `#[idempotent]` axum handler.
struct Handler<'a, L, R> {
    idem: &'a Idem,
    cfg: &'static HandlerConfig,
    lookup: L,
    /// The handler's transaction in the atomic mode.
    atomic: Option<Arc<dyn Atomic>>,
    _out: PhantomData<fn() -> R>,
}

impl<L: Replayer, R: IntoSnapshot + Send> Front for Handler<'_, L, R> {
    type Out = R;
    type Answer = Response;

    fn reject(&self, error: IdempotencyError, client_key: Option<&str>) -> Response {
        self.idem.problem(&error, client_key).into_response()
    }

    async fn replay(self, record: Record) -> Response {
        self.lookup
            .replay(record, self.cfg.contract, R::biz_no_field())
            .await
    }

    fn unprotected(self, out: R) -> Response {
        let mut resp = out.into_response();
        mark_unprotected(&mut resp);
        resp
    }

    fn atomic(&self) -> Option<Arc<dyn Atomic>> {
        self.atomic.clone()
    }

    async fn settle(&mut self, out: R) -> (Settlement, Response) {
        let biz_no = out.biz_no();
        let key_fields = out.key_fields();
        let resp = out.into_response();
        let disposition = self
            .idem
            .policy()
            .classify(self.cfg.contract, resp.status().as_u16());
        let rules = SnapshotRules {
            replay_headers: self.cfg.replay_headers,
            limit: self
                .cfg
                .max_snapshot_bytes
                .unwrap_or(self.idem.max_snapshot_bytes_in_force()),
            biz_no_field: R::biz_no_field(),
            biz_no_from_body: false,
            key_fields,
        };
        settle(disposition, resp, biz_no, &rules).await
    }
}

async fn latest_replay<L, LF, LR>(record: Record, lookup: L) -> Response
where
    L: FnOnce(String) -> LF,
    LF: Future<Output = LR>,
    LR: IntoResponse,
{
    let biz_no = match (&record.state, &record.biz_no) {
        (RecordState::Completed, Some(biz_no)) => biz_no.clone(),
        _ => return exact_replay(record),
    };
    let mut resp = lookup(biz_no).await.into_response();
    if resp.status().is_success() {
        *resp.status_mut() = StatusCode::OK;
    }
    mark_replayed(&mut resp);
    resp
}
