//! [`run`]: the body of every `#[idempotent]` axum handler, reached by the generated code
//! through `__private` (not a public API: the attribute is). What a request is answered in each
//! situation is documented in `docs/http.md`.

use core::future::Future;
use core::marker::PhantomData;

use axum::response::{IntoResponse, Response};
use http::StatusCode;

use super::context::IdemContext;
use super::respond::{SnapshotRules, mark_unprotected, settle};
use super::snapshot::IntoSnapshot;
use crate::engine::call::{Call, Latest, Mode, Stored};
use crate::engine::{
    ClaimSettings, Contract, Front, HandlerConfig, Idem, IdempotencyError, Settlement, execute,
};
use crate::http::KeySource;
use crate::http::replay::{ReplayResponse, exact_replay, suppressed_replay};
use crate::store::{Record, RecordState};

/// Runs a handler for a key (and scope) until one result is stored, and answers every later
/// request with the key as `mode` says: the stored response ([`Mode::stored`]: exactly, or the
/// business number alone under `suppress_only`), or the current state ([`Mode::latest`]); in
/// the atomic mode ([`Mode::atomic`]) the result commits in the handler's transaction.
///
/// A `latest_state` configuration without a lookup replays exactly. A replay whose lookup
/// answers 2xx is sent as `200`; any other status of the lookup (the resource is gone: `404`) is
/// sent as it is. A stored record without a business number (a failure kept by a custom policy)
/// is replayed exactly.
pub fn run<R, F, M>(
    cx: IdemContext,
    call: Call<'_, KeySource<'_>>,
    mode: Mode<M>,
    handler: F,
) -> impl Future<Output = Response> + use<R, F, M>
where
    F: Future<Output = R> + Send,
    R: IntoSnapshot + Send,
    M: Replayer,
{
    let cfg = call.config;
    let key = cx.head.key(call.key, cfg.operation, call.scope);
    let hash = call.hash;
    async move {
        let front = Handler {
            idem: cx.idem(),
            cfg,
            mode,
            _out: PhantomData::<fn() -> R>,
        };
        execute(cx.idem(), ClaimSettings::of(cfg), key, hash, front, handler).await
    }
}

/// How an HTTP handler's replays are built, for each kind of [`Mode`].
pub trait Replayer: Send {
    /// The replay of `record`.
    fn replay(
        self,
        record: Record,
        contract: Contract,
        biz_no_field: &'static str,
    ) -> impl Future<Output = Response> + Send;
}

impl Replayer for Stored {
    async fn replay(self, record: Record, contract: Contract, field: &'static str) -> Response {
        match contract {
            Contract::SuppressOnly => suppressed_replay(record, field),
            Contract::ExactReplay | Contract::LatestState => exact_replay(record),
        }
    }
}

impl<L, LF, LR> Replayer for Latest<L>
where
    L: FnOnce(String) -> LF + Send,
    LF: Future<Output = LR> + Send,
    LR: IntoResponse,
{
    async fn replay(self, record: Record, _: Contract, _: &'static str) -> Response {
        let biz_no = match (&record.state, &record.biz_no) {
            (RecordState::Completed, Some(biz_no)) => biz_no.clone(),
            _ => return exact_replay(record),
        };
        let mut resp = (self.0)(biz_no).await.into_response();
        if resp.status().is_success() {
            *resp.status_mut() = StatusCode::OK;
        }
        resp.mark_replayed();
        resp
    }
}

/// The front of an `#[idempotent]` axum handler.
struct Handler<'a, M, R> {
    idem: &'a Idem,
    cfg: &'static HandlerConfig,
    mode: Mode<M>,
    _out: PhantomData<fn() -> R>,
}

impl<M: Replayer, R: IntoSnapshot + Send> Front for Handler<'_, M, R> {
    type Out = R;
    type Answer = Response;

    fn reject(&self, error: IdempotencyError, client_key: Option<&str>) -> Response {
        self.idem.problem(&error, client_key).into_response()
    }

    async fn replay(self, record: Record) -> Response {
        self.mode
            .replay
            .replay(record, self.cfg.contract, R::biz_no_field())
            .await
    }

    fn unprotected(self, out: R) -> Response {
        let mut resp = out.into_response();
        mark_unprotected(&mut resp);
        resp
    }

    fn atomic(&self) -> Option<std::sync::Arc<dyn crate::store::atomic::Atomic>> {
        self.mode.atomic.clone()
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
                .unwrap_or(self.idem.max_snapshot_bytes()),
            biz_no_field: R::biz_no_field(),
            biz_no_from_body: false,
            key_fields,
        };
        settle(disposition, resp, biz_no, &rules).await
    }
}
