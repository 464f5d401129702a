//! [`OperationId`] and [`operation_id`]: the stable id of the operation a handler executes (S22).

use core::fmt;
use core::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static OPERATION: OperationId;
}

/// The stable id of the operation being executed: a UUID generated when the key is first
/// claimed and **kept across lease takeovers** (a retry that takes over a crashed attempt sees the
/// same id). Pass it downstream (S22) and keep a unique constraint on it in the business table
/// (S23), so that a zombie attempt and its successor cannot both write.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::engine::{HandlerConfig, Idem, IdempotencyError, operation_id, run_once};
/// use idem_runtime::RequestHash;
///
/// #[derive(Debug, serde::Serialize, serde::Deserialize)]
/// struct SendError(String);
/// impl From<IdempotencyError> for SendError {
///     fn from(e: IdempotencyError) -> Self { SendError(e.to_string()) }
/// }
///
/// static CONFIG: HandlerConfig = HandlerConfig::new("mail::send");
/// let idem = Idem::new(idem_runtime::store::MemoryStore::new());
/// assert!(operation_id().is_none()); // outside an idempotent handler
/// let hash = RequestHash::of_bytes(b"{}");
/// let id: Result<String, SendError> = run_once(&idem, &CONFIG, "k", &[], hash, async {
///     let op = operation_id().expect("inside the handler");
///     assert!(op.is_protected() && !op.took_over());
///     Ok(op.to_string()) // e.g. the mail provider's own idempotency key
/// }).await;
/// assert_eq!(id.unwrap().len(), 36);
/// # });
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OperationId {
    id: Arc<str>,
    took_over: bool,
    protected: bool,
}

impl OperationId {
    pub(crate) fn new(id: &str, took_over: bool, protected: bool) -> Self {
        OperationId {
            id: Arc::from(id),
            took_over,
            protected,
        }
    }

    /// The id (a lowercase hyphenated UUID).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # use idem_runtime::engine::{HandlerConfig, Idem, IdempotencyError, operation_id, run_once};
    /// # #[derive(Debug, serde::Serialize, serde::Deserialize)] struct E;
    /// # impl From<IdempotencyError> for E { fn from(_: IdempotencyError) -> Self { E } }
    /// # static C: HandlerConfig = HandlerConfig::new("op");
    /// # let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// # let hash = idem_runtime::RequestHash::of_bytes(b"{}");
    /// run_once::<(), E, _>(&idem, &C, "k", &[], hash, async {
    ///     let op = operation_id().unwrap();
    ///     assert_eq!(op.as_str().len(), 36);
    ///     Ok(())
    /// }).await.unwrap();
    /// # });
    /// ```
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// `true` when this attempt took over the expired lease of an earlier attempt of the same
    /// operation, which may have done part of the work.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # use idem_runtime::engine::{HandlerConfig, Idem, IdempotencyError, operation_id, run_once};
    /// # #[derive(Debug, serde::Serialize, serde::Deserialize)] struct E;
    /// # impl From<IdempotencyError> for E { fn from(_: IdempotencyError) -> Self { E } }
    /// # static C: HandlerConfig = HandlerConfig::new("op");
    /// # let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// # let hash = idem_runtime::RequestHash::of_bytes(b"{}");
    /// run_once::<(), E, _>(&idem, &C, "k", &[], hash, async {
    ///     let op = operation_id().unwrap();
    ///     assert!(!op.took_over()); // a fresh claim
    ///     Ok(())
    /// }).await.unwrap();
    /// # });
    /// ```
    pub fn took_over(&self) -> bool {
        self.took_over
    }

    /// `false` when the handler runs unprotected (the store was unavailable and the handler is
    /// `fail_open`): the id is then fresh for this attempt, and a retry gets another.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # use idem_runtime::engine::{HandlerConfig, Idem, IdempotencyError, operation_id, run_once};
    /// # #[derive(Debug, serde::Serialize, serde::Deserialize)] struct E;
    /// # impl From<IdempotencyError> for E { fn from(_: IdempotencyError) -> Self { E } }
    /// # static C: HandlerConfig = HandlerConfig::new("op");
    /// # let idem = Idem::new(idem_runtime::store::MemoryStore::new());
    /// # let hash = idem_runtime::RequestHash::of_bytes(b"{}");
    /// run_once::<(), E, _>(&idem, &C, "k", &[], hash, async {
    ///     let op = operation_id().unwrap();
    ///     assert!(op.is_protected());
    ///     Ok(())
    /// }).await.unwrap();
    /// # });
    /// ```
    pub fn is_protected(&self) -> bool {
        self.protected
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

impl fmt::Debug for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperationId({:?}", &*self.id)?;
        if self.took_over {
            f.write_str(", took over")?;
        }
        if !self.protected {
            f.write_str(", unprotected")?;
        }
        f.write_str(")")
    }
}

impl serde::Serialize for OperationId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.id)
    }
}

impl AsRef<str> for OperationId {
    fn as_ref(&self) -> &str {
        &self.id
    }
}

/// The id of the operation the current handler executes, or `None` outside an idempotent
/// handler. Set by the engine around the handler future (a tokio task-local), so it is visible in
/// everything the handler awaits, but not in tasks it spawns: pass it to them explicitly.
///
/// ```
/// assert!(idem_runtime::engine::operation_id().is_none());
/// ```
pub fn operation_id() -> Option<OperationId> {
    OPERATION.try_with(Clone::clone).ok()
}

/// Runs `fut` with `op` as the current operation.
pub(crate) fn with_operation<F: Future>(
    op: OperationId,
    fut: F,
) -> impl Future<Output = F::Output> {
    OPERATION.scope(op, fut)
}

/// A one-off id for an unprotected (fail-open) run.
pub(crate) fn fresh_operation_id() -> OperationId {
    let id = crate::store::new_operation_id().unwrap_or_else(|_| "unprotected".to_owned());
    OperationId::new(&id, false, false)
}
