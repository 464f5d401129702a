//! The atomic mode of an [`Attempt`]: the handler's transaction begun before its first poll,
//! and its result written and committed in that transaction with the handler's rows, or
//! everything rolled back.

use super::Attempt;
use crate::engine::error::IdempotencyError;
use crate::engine::front::{Front, Settlement, bounded};
use crate::store::atomic::Atomic;
use crate::store::{Chain, DEFAULT_RETRY_AFTER, Outcome, StoreError, is_aborted_transaction};
use crate::telemetry::{self, Settled};

impl Attempt {
    /// Begins the atomic mode's transaction, before the handler's first poll. When it cannot
    /// begin, the handler never ran: the lease ends at once, and the record keeps its operation
    /// id (a record taken over may hold earlier work under it), so the retry runs the handler.
    pub(super) async fn begin(&mut self, atomic: &dyn Atomic) -> Result<(), StoreError> {
        let call = bounded(self.wait, atomic.begin(&*self.store));
        let begun = telemetry::store_call(self.store.backend(), "begin", call).await;
        if let Err(e) = &begun {
            self.report("the handler's transaction did not begin", e);
            let abandoned = self.abandon().await;
            let _ = self.conclude("lease not ended", Settled::Abandoned, abandoned);
        }
        begun
    }

    /// Settles an atomic attempt: the completion written and committed in the handler's
    /// transaction with its rows, or everything rolled back.
    ///
    /// * Stored and committed: the handler's answer.
    /// * Fenced out (a retry took the operation over while this attempt ran): nothing of this
    ///   attempt committed, so it answers what a retry sees now, like a superseded attempt of
    ///   the two-commit mode — but never its own answer, which describes rows that do not exist.
    /// * The completion or the commit failed (connection lost, deadlock, no answer in time):
    ///   the rows rolled back with the result, or the commit's outcome is unknown. The record
    ///   keeps its operation id and its lease ends at once (a fenced `UPDATE` that changes
    ///   nothing if the commit did go through: the record is then completed), and the client is
    ///   answered `503` + `Retry-After`: its retry replays what committed or runs the handler
    ///   again, under the same operation id.
    /// * Nothing to store (release, abandon): the transaction rolls back first (on SQLite it
    ///   holds the write lock the release needs), then the record is settled as usual.
    pub(super) async fn settle_atomic<Fr: Front>(
        &mut self,
        atomic: &dyn Atomic,
        settlement: Settlement,
        front: Fr,
        answer: Fr::Answer,
        client_key: &str,
    ) -> Fr::Answer {
        let completion = match settlement {
            Settlement::Store(completion) => completion,
            other => {
                atomic.rollback().await;
                // Superseded while it ran, its answer is what a retry sees (its error may come
                // from that: a row of the operation the takeover committed), as in the
                // two-commit mode.
                let settled = self.carry_out(other).await;
                return self
                    .answer_settled(settled, front, answer, client_key)
                    .await;
            }
        };
        let committed = if self.fenced_out() {
            atomic.rollback().await;
            Err(self.fenced_error())
        } else {
            match self.stored(&completion) {
                Ok(sealed) => {
                    let call =
                        bounded(self.wait, atomic.commit(&*self.store, &self.lease, &sealed));
                    telemetry::store_call(self.store.backend(), "complete", call).await
                }
                Err(e) => {
                    atomic.rollback().await;
                    Err(e)
                }
            }
        };
        let committed = match committed {
            // A statement of the handler failed and PostgreSQL aborted its transaction: the
            // completion could not be written in it, no `COMMIT` was sent, and nothing of the
            // attempt committed. A failure answer describes no rows, so it is stored on its own,
            // fenced, as the two-commit mode stores it: without this, a handler whose statement
            // fails the same way every time would answer `503` to every retry. A success answer
            // would describe rows that do not exist: it gets `503` below, and the retry runs
            // the handler again.
            Err(e) if completion.outcome == Outcome::FailedStored && is_aborted_transaction(&e) => {
                tracing::debug!(
                    target: "idem",
                    operation = self.lease.key.operation(),
                    key_hash = %self.lease.key.hash_hex(),
                    error = %Chain(&e),
                    "the handler's transaction was aborted by its own failed statement: storing \
                     its failure answer on its own"
                );
                match self.stored(&completion) {
                    Ok(stored) => {
                        let call = bounded(self.wait, self.store.complete(&self.lease, &stored));
                        telemetry::store_call(self.store.backend(), "complete", call).await
                    }
                    Err(e) => Err(e),
                }
            }
            committed => committed,
        };
        match committed {
            Ok(()) => {
                if let Some(cache) = &self.replay_cache {
                    cache.insert_completed(&self.lease, &completion, self.store.clock());
                }
                let _ = self.conclude("result not stored", Settled::Stored, Ok(()));
                answer
            }
            Err(e @ StoreError::FencedOut { .. }) => {
                let _ = self.conclude("result not stored", Settled::Stored, Err(e));
                drop(answer);
                let own = front.reject(
                    IdempotencyError::Unavailable {
                        retry_after: DEFAULT_RETRY_AFTER,
                    },
                    Some(client_key),
                );
                self.superseded(front, own, client_key).await
            }
            Err(e) => {
                self.report(
                    "result not stored, and the handler's transaction rolled back with it",
                    &e,
                );
                let abandoned = self.abandon().await;
                let _ = self.conclude("lease not ended", Settled::Abandoned, abandoned);
                drop(answer);
                front.reject(
                    IdempotencyError::Unavailable {
                        retry_after: e.retry_after().unwrap_or(DEFAULT_RETRY_AFTER),
                    },
                    Some(client_key),
                )
            }
        }
    }
}
