//! [`run_once`]: the framework-free form, for queue consumers and any `async fn -> Result<T, E>`.

use core::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::attempt::{Begin, Terms, begin};
use super::config::{HandlerConfig, Idem};
use super::error::IdempotencyError;
use super::operation::{fresh_operation_id, with_operation};
use super::scope::{ScopePart, scoped_key};
use crate::fingerprint::RequestHash;
use crate::store::Completion;

/// Runs `f` at most once per key (and scope) within the TTL; every later call with the same key
/// and request hash returns the **stored** `Result` without running `f`.
///
/// This is what `#[idempotent(store = .., key = msg.id, ..)]` generates on a plain
/// `async fn .. -> Result<T, E>` (a queue consumer, a cron job, a webhook processor):
///
/// * `Ok(t)` is stored as completed (classified as status `200` by the handle's
///   [`OutcomePolicy`](super::OutcomePolicy));
/// * `Err(e)` is classified as status `500`: under the [`DefaultPolicy`](super::DefaultPolicy) it
///   is stored as a terminal failure under `exact_replay` (a redelivery gets the same `Err`), and
///   released under the other contracts (a redelivery runs `f` again);
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
/// Cancellation: dropping the returned future before `f` finished releases the claim (on a tokio
/// runtime), so a redelivery runs `f`. A result that cannot be serialized is returned but not
/// stored (the claim is released).
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
    T: Serialize + DeserializeOwned,
    E: Serialize + DeserializeOwned + From<IdempotencyError>,
{
    let scoped = scoped_key(cfg.operation, scope, key);
    let idem = idem.clone();
    let client_key = key.to_owned();
    async move {
        let scoped = scoped.map_err(|e| E::from(e.into()))?;
        let terms = Terms {
            lease: cfg.lease,
            ttl: cfg.ttl,
            fail_open: cfg.fail_open,
        };
        let mut attempt = match begin(&idem, &scoped, &client_key, hash, terms).await {
            Begin::Run(attempt) => attempt,
            Begin::Replay(record) => {
                return serde_json::from_slice::<Result<T, E>>(&record.body)
                    .map_err(|e| E::from(IdempotencyError::Snapshot(e)))?;
            }
            Begin::Reject(e) => return Err(E::from(e)),
            Begin::Unprotected => return with_operation(fresh_operation_id(), f).await,
        };
        let result = attempt.run(f).await;
        let status = if result.is_ok() { 200 } else { 500 };
        let outcome = idem.policy().classify(cfg.contract, status).outcome();
        match outcome.map(|o| (o, serde_json::to_vec(&result))) {
            Some((outcome, Ok(body))) => {
                // Not stored (fenced out, store down): the result is still this call's answer;
                // the lease expires and a redelivery runs `f` again.
                let _ = attempt
                    .complete(&Completion::new(outcome, status, body))
                    .await;
            }
            None | Some((_, Err(_))) => {
                let _ = attempt.release().await;
            }
        }
        result
    }
}
