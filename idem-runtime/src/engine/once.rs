//! [`run_once`]: the framework-free form, for queue consumers and any `async fn -> Result<T, E>`.

use core::future::Future;
use core::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::IdempotencyError;
use super::flow::{RequestKey, execute};
use super::front::{ClaimSettings, Front, Settlement};
use super::handle::Idem;
use super::handler_config::HandlerConfig;
use crate::fingerprint::RequestHash;
use crate::key::ScopePart;
use crate::store::{Completion, Record};

/// Runs `f` for a key (and scope) until one result is stored; every later call with the same key
/// and request hash within the TTL returns the **stored** `Result` without running `f`.
///
/// This is what `#[idempotent(store = .., key = msg.id, ..)]` generates on a plain
/// `async fn .. -> Result<T, E>` (a queue consumer, a cron job, a webhook processor):
///
/// * `Ok(t)` is stored as completed (classified as status `200` by the handle's
///   [`OutcomePolicy`](super::OutcomePolicy));
/// * `Err(e)` is classified as status `500`: under the [`DefaultPolicy`](super::DefaultPolicy) it
///   is stored as a terminal failure under `exact_replay` (a redelivery gets the same `Err`), and
///   abandoned under the other contracts (a redelivery runs `f` again, under the same operation
///   id);
/// * the result is stored as JSON (`{"Ok": ..}` / `{"Err": ..}`, serde's form of `Result`), whole:
///   the snapshot size limit does not apply;
/// * a replay returns the stored result whatever the contract;
/// * idempotency conditions come back as `Err(E::from(IdempotencyError::..))`: `InProgress`
///   (another consumer runs the same key: requeue with a delay of `retry_after`), `KeyReused`
///   (the key was used for another payload), `Unavailable` (the store is down and the handler
///   fails closed), `InvalidKey`, and `Snapshot` when a stored result no longer deserializes
///   (the type changed) — then the stored record stays until its TTL.
///
/// The key is taken as it is (no sf-string unquoting): 1 to 255 characters, no control
/// characters. The key is scoped by `cfg.operation` and `scope` like an HTTP key.
///
/// `f` may run more than once for one key — after a crash, a cancellation or its timeout
/// ([`HandlerConfig::timeout`]: then `Err(IdempotencyError::TimedOut)`) — but always under the
/// same operation id ([`operation_id`](super::operation_id)): dropping the returned future
/// before the result was stored keeps the record and ends its lease (on a tokio runtime), so the
/// redelivery takes it over at once and runs `f` under that id. Deduplicate effects outside the
/// store on it (S22). A result that cannot be serialized is returned but not stored (the record
/// is abandoned likewise).
///
/// The returned future borrows nothing from the arguments: `key` and `scope` are read when
/// `run_once` is called, so `f` may move the message they came from.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::engine::{HandlerConfig, Idem, IdempotencyError, run_once};
/// use idem_runtime::RequestHash;
///
/// #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// enum ShipError { OutOfStock, Idempotency(u16) }
/// impl From<IdempotencyError> for ShipError {
///     fn from(e: IdempotencyError) -> Self { ShipError::Idempotency(e.status()) }
/// }
///
/// struct Message { id: String, sku: String }
/// static SHIP: HandlerConfig = HandlerConfig::new("warehouse::ship");
/// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
///
/// async fn ship(idem: &Idem, msg: Message) -> Result<u64, ShipError> {
///     let hash = RequestHash::of_bytes(msg.sku.as_bytes());
///     run_once(idem, &SHIP, &msg.id, &[&"warehouse-1"], hash, async move {
///         if msg.sku == "none" { Err(ShipError::OutOfStock) } else { Ok(7) }
///     })
///     .await
/// }
/// let msg = || Message { id: "m-1".into(), sku: "sku-1".into() };
/// assert_eq!(ship(&idem, msg()).await, Ok(7));
/// assert_eq!(ship(&idem, msg()).await, Ok(7)); // replayed
/// let other = Message { id: "m-1".into(), sku: "sku-2".into() };
/// assert_eq!(ship(&idem, other).await, Err(ShipError::Idempotency(422)));
/// let failing = || Message { id: "m-2".into(), sku: "none".into() };
/// assert_eq!(ship(&idem, failing()).await, Err(ShipError::OutOfStock));
/// assert_eq!(ship(&idem, failing()).await, Err(ShipError::OutOfStock)); // the stored Err
/// # });
/// ```
pub fn run_once<T, E, F>(
    idem: &Idem,
    cfg: &'static HandlerConfig,
    key: &str,
    scope: &[&dyn ScopePart],
    hash: RequestHash,
    f: F,
) -> impl Future<Output = Result<T, E>> + use<T, E, F>
where
    F: Future<Output = Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
    E: Serialize + DeserializeOwned + From<IdempotencyError> + Send,
{
    let key = match cfg.operation {
        Some(operation) => {
            RequestKey::new(operation, scope, key.to_owned()).map_err(IdempotencyError::from)
        }
        None => Err(IdempotencyError::Misconfigured {
            message: "`run_once` has no route to name its operation after: build its `HandlerConfig` with `HandlerConfig::new(\"<operation>\")`",
        }),
    };
    let idem = idem.clone();
    async move {
        let front = Once {
            idem: &idem,
            cfg,
            _result: PhantomData,
        };
        execute(&idem, ClaimSettings::of(cfg), key, hash, front, f).await
    }
}

/// The front of [`run_once`]: results stored as serde's JSON of `Result<T, E>`.
struct Once<'a, T, E> {
    idem: &'a Idem,
    cfg: &'static HandlerConfig,
    _result: PhantomData<fn() -> (T, E)>,
}

impl<T, E> Front for Once<'_, T, E>
where
    T: Serialize + DeserializeOwned + Send,
    E: Serialize + DeserializeOwned + From<IdempotencyError> + Send,
{
    type Out = Result<T, E>;
    type Answer = Result<T, E>;

    fn reject(&self, error: IdempotencyError, _client_key: Option<&str>) -> Result<T, E> {
        Err(E::from(error))
    }

    async fn replay(self, record: Record) -> Result<T, E> {
        serde_json::from_slice::<Result<T, E>>(&record.body)
            .map_err(|e| E::from(IdempotencyError::Snapshot(e)))?
    }

    fn unprotected(self, out: Result<T, E>) -> Result<T, E> {
        out
    }

    async fn settle(&mut self, out: Result<T, E>) -> (Settlement, Result<T, E>) {
        let status = if out.is_ok() { 200 } else { 500 };
        let disposition = self.idem.policy().classify(self.cfg.contract, status);
        let settlement = match disposition.outcome() {
            Some(outcome) => match serde_json::to_vec(&out) {
                Ok(body) => Settlement::Store(Completion::new(outcome, status, body)),
                // Still this call's answer; the redelivery continues the operation.
                Err(_) => Settlement::Abandon,
            },
            None => Settlement::without_result(disposition),
        };
        (settlement, out)
    }
}
