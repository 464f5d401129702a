//! [`run`]: the body of every `#[idempotent]` tonic method, reached by the generated code through
//! `__private` (not a public API: the attribute is). What a call is answered in each situation
//! is documented in `docs/grpc.md`.

use core::future::Future;
use core::marker::PhantomData;

use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::{Code, Response, Status};

use super::context::{GrpcContext, KeySource};
use super::snapshot::GrpcMessage;
use super::status::{http_status_of_code, status};
use super::{IDEMPOTENCY_STATUS, IDEMPOTENT_REPLAYED};
use crate::engine::call::{Call, Latest, Mode, Stored};
use crate::engine::{
    ClaimSettings, Contract, Front, HandlerConfig, IdempotencyError, Settlement, execute, storable,
};
use crate::store::{Completion, Record, RecordState};

/// What a tonic method returns.
pub type Answer<M> = Result<Response<M>, Status>;

/// The stored header that says a record holds a `Status`, not a message: its code.
const GRPC_STATUS: &str = "grpc-status";
/// The stored status message.
const GRPC_MESSAGE: &str = "grpc-message";
/// The stored header of a message over the snapshot limit, stored as its business number alone.
const SNAPSHOT: &str = "idempotent-snapshot";

/// Runs a tonic method's body for a key (and scope) until one result is stored, and answers
/// every later call with the key as `mode` says: the stored message or `Status`
/// ([`Mode::stored`]: exactly, or the message rebuilt from its business number under
/// `suppress_only`), or the current state ([`Mode::latest`]).
///
/// A method's `Status` is classified by the handle's outcome policy under the HTTP status of its
/// code ([`http_status_of_code`](super::http_status_of_code)): by default an `INVALID_ARGUMENT`
/// (400) is stored and replayed like a `400` would be, an `UNAVAILABLE` (503) is not.
pub fn run<M, F, R>(
    cx: GrpcContext,
    call: Call<'_, KeySource<'_>>,
    mode: Mode<R>,
    handler: F,
) -> impl Future<Output = Answer<M>> + use<M, F, R>
where
    M: GrpcMessage,
    F: Future<Output = Answer<M>> + Send,
    R: GrpcReplayer<M>,
{
    let cfg = call.config;
    let key = cx.key(call.key, cfg.operation, call.scope);
    let hash = call.hash;
    async move {
        let front = Method {
            cx: &cx,
            cfg,
            mode,
            _out: PhantomData::<fn() -> M>,
        };
        execute(cx.idem(), ClaimSettings::of(cfg), key, hash, front, handler).await
    }
}

/// How a tonic method's replays are built, for each kind of [`Mode`].
pub trait GrpcReplayer<M>: Send {
    /// The replay of `record`.
    fn replay(self, record: Record, contract: Contract) -> impl Future<Output = Answer<M>> + Send;
}

impl<M: GrpcMessage> GrpcReplayer<M> for Stored {
    async fn replay(self, record: Record, contract: Contract) -> Answer<M> {
        match contract {
            Contract::SuppressOnly => suppressed_replay(record),
            Contract::ExactReplay | Contract::LatestState => exact_replay(record),
        }
    }
}

impl<M, L, LF> GrpcReplayer<M> for Latest<L>
where
    M: GrpcMessage,
    L: FnOnce(String) -> LF + Send,
    LF: Future<Output = Answer<M>> + Send,
{
    async fn replay(self, record: Record, _: Contract) -> Answer<M> {
        let biz_no = match (&record.state, &record.biz_no) {
            (RecordState::Completed, Some(biz_no)) => biz_no.clone(),
            _ => return exact_replay(record),
        };
        match (self.0)(biz_no).await {
            Ok(mut resp) => {
                mark(resp.metadata_mut(), IDEMPOTENT_REPLAYED, "true");
                Ok(resp)
            }
            Err(mut status) => {
                mark(status.metadata_mut(), IDEMPOTENT_REPLAYED, "true");
                Err(status)
            }
        }
    }
}

/// The front of an `#[idempotent]` tonic method.
struct Method<'a, M, R> {
    cx: &'a GrpcContext,
    cfg: &'static HandlerConfig,
    mode: Mode<R>,
    _out: PhantomData<fn() -> M>,
}

impl<M: GrpcMessage, R: GrpcReplayer<M>> Front for Method<'_, M, R> {
    type Out = Answer<M>;
    type Answer = Answer<M>;

    fn reject(&self, error: IdempotencyError, client_key: Option<&str>) -> Answer<M> {
        Err(status(&error, client_key))
    }

    async fn replay(self, record: Record) -> Answer<M> {
        self.mode.replay.replay(record, self.cfg.contract).await
    }

    fn unprotected(self, out: Answer<M>) -> Answer<M> {
        match out {
            Ok(mut resp) => {
                mark(resp.metadata_mut(), IDEMPOTENCY_STATUS, "unprotected");
                Ok(resp)
            }
            Err(mut status) => {
                mark(status.metadata_mut(), IDEMPOTENCY_STATUS, "unprotected");
                Err(status)
            }
        }
    }

    fn atomic(&self) -> Option<std::sync::Arc<dyn crate::store::atomic::Atomic>> {
        self.mode.atomic.clone()
    }

    async fn settle(&mut self, out: Answer<M>) -> (Settlement, Answer<M>) {
        let idem = self.cx.idem();
        let code = match &out {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        };
        let http_status = http_status_of_code(code);
        let disposition = idem.policy().classify(self.cfg.contract, http_status);
        let Some(outcome) = disposition.outcome() else {
            return (Settlement::without_result(disposition), out);
        };
        let replay_headers = self.cfg.replay_headers;
        let limit = self
            .cfg
            .max_snapshot_bytes
            .unwrap_or(idem.max_snapshot_bytes());
        let completion = match &out {
            Ok(resp) => {
                let message = resp.get_ref();
                let biz_no = storable(message.biz_no());
                let mut headers = stored_metadata(resp.metadata(), replay_headers);
                let mut body = message.encode_to_vec();
                if body.len() > limit
                    && let Some(small) = biz_no.as_deref().and_then(M::from_biz_no)
                {
                    // Over the limit: kept as its business number (S12), never as a bare "ok".
                    body = small.encode_to_vec();
                    headers.push((SNAPSHOT.to_owned(), b"truncated".to_vec()));
                }
                Completion {
                    outcome,
                    status: http_status,
                    headers,
                    body,
                    biz_no,
                    expire_at: None,
                }
            }
            Err(status) => {
                let mut headers = stored_metadata(status.metadata(), replay_headers);
                headers.push((
                    GRPC_STATUS.to_owned(),
                    (status.code() as i32).to_string().into_bytes(),
                ));
                headers.push((
                    GRPC_MESSAGE.to_owned(),
                    status.message().as_bytes().to_vec(),
                ));
                Completion {
                    outcome,
                    status: http_status,
                    headers,
                    body: status.details().to_vec(),
                    biz_no: None,
                    expire_at: None,
                }
            }
        };
        (Settlement::Store(completion), out)
    }
}

/// Metadata never stored nor replayed, even if listed in `headers = [..]`: the protocol's own
/// (`grpc-*`, `content-type`, `te`), credentials and hop-by-hop headers.
fn never_stored(name: &str) -> bool {
    name.starts_with("grpc-")
        || crate::engine::never_stored(name)
        || name == "content-type"
        || name == SNAPSHOT
}

/// The ASCII metadata of `map` whose names `#[idempotent(headers = [..])]` lists.
fn stored_metadata(map: &MetadataMap, listed: &[&str]) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .filter_map(|entry| match entry {
            tonic::metadata::KeyAndValueRef::Ascii(name, value) => Some((name.as_str(), value)),
            tonic::metadata::KeyAndValueRef::Binary(..) => None,
        })
        .filter(|(name, _)| {
            !never_stored(name) && listed.iter().any(|l| l.eq_ignore_ascii_case(name))
        })
        .map(|(name, value)| (name.to_owned(), value.as_encoded_bytes().to_vec()))
        .collect()
}

fn mark(map: &mut MetadataMap, name: &'static str, value: &'static str) {
    map.insert(name, MetadataValue::from_static(value));
}

/// The stored message or `Status`, with its stored metadata (`exact_replay`, and every stored
/// failure).
fn exact_replay<M: GrpcMessage>(record: Record) -> Answer<M> {
    let mut metadata = MetadataMap::new();
    let mut code = None;
    let mut message = String::new();
    for (name, value) in &record.headers {
        match name.as_str() {
            GRPC_STATUS => {
                code = core::str::from_utf8(value)
                    .ok()
                    .and_then(|c| c.parse::<i32>().ok())
                    .map(Code::from);
            }
            GRPC_MESSAGE => message = String::from_utf8_lossy(value).into_owned(),
            SNAPSHOT => mark(&mut metadata, SNAPSHOT, "truncated"),
            name => {
                if let (Ok(name), Ok(value)) = (
                    MetadataKey::from_bytes(name.as_bytes()),
                    MetadataValue::try_from(value.as_slice()),
                ) {
                    metadata.append(name, value);
                }
            }
        }
    }
    mark(&mut metadata, IDEMPOTENT_REPLAYED, "true");
    if let Some(code) = code {
        return Err(Status::with_details_and_metadata(
            code,
            message,
            record.body.into(),
            metadata,
        ));
    }
    match M::decode(record.body.as_slice()) {
        Ok(message) => {
            let mut resp = Response::new(message);
            *resp.metadata_mut() = metadata;
            Ok(resp)
        }
        Err(e) => {
            tracing::warn!(
                target: "idem",
                error = %e,
                "the stored message does not decode as the method's response type"
            );
            let e = <serde_json::Error as serde::de::Error>::custom(format!(
                "the stored message does not decode as `{}`: {e}",
                core::any::type_name::<M>()
            ));
            Err(status(&IdempotencyError::Snapshot(e), None))
        }
    }
}

/// The message rebuilt from its business number (`suppress_only`); a record without one (a
/// stored failure), or a message that cannot be rebuilt from it, is replayed exactly.
fn suppressed_replay<M: GrpcMessage>(record: Record) -> Answer<M> {
    let small = match (&record.state, &record.biz_no) {
        (RecordState::Completed, Some(biz_no)) => M::from_biz_no(biz_no),
        _ => None,
    };
    match small {
        Some(message) => {
            let mut resp = Response::new(message);
            mark(resp.metadata_mut(), IDEMPOTENT_REPLAYED, "true");
            Ok(resp)
        }
        None => exact_replay(record),
    }
}
