//! [`run`]: the body of every `#[idempotent]` actix-web handler, reached by the generated code
//! through `__private` (not a public API: the attribute is). The counterpart of the axum front's
//! `run`, over the same engine: what a request is answered is documented in `docs/http.md`.

use core::future::Future;
use core::marker::PhantomData;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, Responder};

use super::context::IdemContext;
use super::respond::{mark_unprotected, problem_response, settle};
use super::snapshot::IntoSnapshot;
use crate::engine::call::{Call, Latest, Mode, Stored};
use crate::engine::{
    ClaimSettings, Contract, Front, HandlerConfig, IdempotencyError, Settlement, execute,
};
use crate::http::KeySource;
use crate::http::replay::{ReplayResponse, exact_replay, suppressed_replay};
use crate::http::snapshot::SnapshotRules;
use crate::store::atomic::Atomic;
use crate::store::{Record, RecordState};

/// Runs a handler for a key (and scope) until one result is stored, and answers every later
/// request with the key as `mode` says (as the axum front's `run`). The future is `!Send`, like
/// actix-web's handlers.
pub fn run<R, F, M>(
    cx: IdemContext,
    call: Call<'_, KeySource<'_>>,
    mode: Mode<M>,
    handler: F,
) -> impl Future<Output = HttpResponse> + use<R, F, M>
where
    F: Future<Output = R>,
    R: IntoSnapshot,
    M: Replayer,
{
    let cfg = call.config;
    let key = cx.head.key(call.key, cfg.operation, call.scope);
    let hash = call.hash;
    async move {
        let front = Handler {
            cx: &cx,
            cfg,
            mode,
            _out: PhantomData::<fn() -> R>,
        };
        execute(cx.idem(), ClaimSettings::of(cfg), key, hash, front, handler).await
    }
}

/// How an actix-web handler's replays are built, for each kind of [`Mode`].
pub trait Replayer {
    /// The replay of `record`.
    fn replay(
        self,
        cx: &IdemContext,
        record: Record,
        contract: Contract,
        biz_no_field: &'static str,
    ) -> impl Future<Output = HttpResponse>;
}

impl Replayer for Stored {
    async fn replay(
        self,
        _: &IdemContext,
        record: Record,
        contract: Contract,
        field: &'static str,
    ) -> HttpResponse {
        match contract {
            Contract::SuppressOnly => suppressed_replay(record, field),
            Contract::ExactReplay | Contract::LatestState => exact_replay(record),
        }
    }
}

impl<L, LF, LR> Replayer for Latest<L>
where
    L: FnOnce(String) -> LF,
    LF: Future<Output = LR>,
    LR: Responder,
{
    async fn replay(
        self,
        cx: &IdemContext,
        record: Record,
        _: Contract,
        _: &'static str,
    ) -> HttpResponse {
        let biz_no = match (&record.state, &record.biz_no) {
            (RecordState::Completed, Some(biz_no)) => biz_no.clone(),
            _ => return exact_replay(record),
        };
        let mut resp = (self.0)(biz_no)
            .await
            .respond_to(cx.request())
            .map_into_boxed_body();
        if resp.status().is_success() {
            *resp.status_mut() = StatusCode::OK;
        }
        resp.mark_replayed();
        resp
    }
}

/// The front of an `#[idempotent]` actix-web handler.
struct Handler<'a, M, R> {
    cx: &'a IdemContext,
    cfg: &'static HandlerConfig,
    mode: Mode<M>,
    _out: PhantomData<fn() -> R>,
}

impl<M: Replayer, R: IntoSnapshot> Front for Handler<'_, M, R> {
    type Out = R;
    type Answer = HttpResponse;

    fn reject(&self, error: IdempotencyError, client_key: Option<&str>) -> HttpResponse {
        problem_response(self.cx.idem(), &error, client_key)
    }

    async fn replay(self, record: Record) -> HttpResponse {
        let field = R::biz_no_field();
        let contract = self.cfg.contract;
        self.mode
            .replay
            .replay(self.cx, record, contract, field)
            .await
    }

    fn unprotected(self, out: R) -> HttpResponse {
        let mut resp = out.into_response(self.cx.request());
        mark_unprotected(&mut resp);
        resp
    }

    fn atomic(&self) -> Option<Arc<dyn Atomic>> {
        self.mode.atomic.clone()
    }

    async fn settle(&mut self, out: R) -> (Settlement, HttpResponse) {
        let idem = self.cx.idem();
        let biz_no = out.biz_no();
        let key_fields = out.key_fields();
        let resp = out.into_response(self.cx.request());
        let disposition = idem
            .policy()
            .classify(self.cfg.contract, resp.status().as_u16());
        let rules = SnapshotRules {
            replay_headers: self.cfg.replay_headers,
            limit: self
                .cfg
                .max_snapshot_bytes
                .unwrap_or(idem.max_snapshot_bytes()),
            biz_no_field: R::biz_no_field(),
            biz_no_from_body: false,
            key_fields,
        };
        settle(disposition, resp, biz_no, &rules).await
    }
}
