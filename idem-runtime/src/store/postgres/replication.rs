//! [`Replication`]: what a PostgreSQL server says about its replication.
//!
//! The rule: read from the server on one of the store's own sessions, never assumed; the store
//! refuses a standby and warns when a failover could lose acknowledged commits.

use sqlx::postgres::PgConnection;

use super::classify;
use crate::store::error::StoreError;

/// What a PostgreSQL server says about its replication, as the store's own sessions see it
/// ([`PostgresStore::replication`](super::PostgresStore::replication)): whether a commit the
/// store was told about survives a failover to a standby.
///
/// A commit waits for a standby only when the primary names one in
/// `synchronous_standby_names` **and** the session's `synchronous_commit` is `on`,
/// `remote_write` or `remote_apply`; with `off` or `local`, or no name, PostgreSQL replicates
/// asynchronously, and a failover can lose the last acknowledged claims.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replication {
    /// The server is itself a standby (`pg_is_in_recovery()`): the store refuses it.
    pub standby: bool,
    /// The session's `synchronous_commit`.
    pub synchronous_commit: String,
    /// The server's `synchronous_standby_names` (empty: none).
    pub synchronous_standby_names: String,
    /// Standbys streaming from this server now (`pg_stat_replication`).
    pub streaming_standbys: i64,
}

impl Replication {
    pub(super) async fn read(conn: &mut PgConnection) -> Result<Self, StoreError> {
        let (standby, synchronous_commit, synchronous_standby_names, streaming_standbys) =
            sqlx::query_as(
                "SELECT pg_is_in_recovery(), current_setting('synchronous_commit'), \
                 current_setting('synchronous_standby_names'), \
                 (SELECT count(*) FROM pg_stat_replication)",
            )
            .fetch_one(&mut *conn)
            .await
            .map_err(classify)?;
        Ok(Replication {
            standby,
            synchronous_commit,
            synchronous_standby_names,
            streaming_standbys,
        })
    }

    /// `true` when every commit of the store's sessions waits until a standby holds it: a
    /// failover to that standby keeps every claim and completion idem acknowledged.
    pub fn keeps_commits_through_failover(&self) -> bool {
        !self.synchronous_standby_names.trim().is_empty()
            && matches!(
                self.synchronous_commit.as_str(),
                "on" | "remote_write" | "remote_apply"
            )
    }
}
