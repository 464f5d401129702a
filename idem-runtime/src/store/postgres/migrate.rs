//! The migrations of a [`PostgresStore`](super::PostgresStore), applied by idem's own runner.
//!
//! The rule: one runner at a time (a session-scoped advisory lock), each migration in a
//! transaction with its history row, and never on a standby.

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

use super::replication::Replication;
use super::statements::{MIGRATIONS_TABLE, migrations_table};
use crate::store::error::StoreError;
use crate::store::migrate::{history, migrate_error, pending};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Checksums (SHA-384, hex) that idem 0.1.0 recorded for migration files whose text differs in
/// this build, accepted as the files' own, so that a database it migrated still starts.
///
/// `20261130000001` holds `CREATE SCHEMA IF NOT EXISTS idem;`, so that the file stands alone for
/// other tools (`psql -f`); 0.1.0's text of it lacked the statement, which is a no-op wherever
/// the table exists (the runner creates the schema before its history table), so a database
/// migrated with either text is the same. A version added instead could not make the file stand
/// alone, and one before it would be applied out of order on existing databases.
const EARLIER_CHECKSUMS: &[(i64, &str)] = &[(
    20261130000001,
    "bd1c0b9a7c6ddb60d8550db1413eb315db89f9da2d8020ab220d27fcdd4902d6a26c2f932e36d831cda498a124b3df3c",
)];

/// Key of the advisory lock that serializes concurrent `migrate()` calls ("idem" in ASCII).
const MIGRATION_LOCK: i64 = 0x6964_656d;

/// Applies the pending migrations on `conn`, its own connection: the advisory lock is
/// session-scoped and serializes concurrent migrations. Refuses a standby, and warns when the
/// server streams to standbys without waiting for them (see [`Replication`]).
pub(super) async fn migrate_on(conn: &mut PgConnection) -> Result<(), StoreError> {
    let replication = Replication::read(&mut *conn).await?;
    if replication.standby {
        return Err(StoreError::Config {
            message: "this PostgreSQL server is a standby (`pg_is_in_recovery()`): point the store at the primary; a claim cannot be written here, and a replay read from a standby may miss the latest completion and answer wrongly".to_owned(),
            source: None,
        });
    }
    if replication.streaming_standbys > 0 && !replication.keeps_commits_through_failover() {
        tracing::warn!(target: "idem",
            standbys = replication.streaming_standbys,
            synchronous_commit = %replication.synchronous_commit,
            synchronous_standby_names = %replication.synchronous_standby_names,
            "PostgreSQL acknowledges commits before a standby holds them: a failover to a standby can lose acknowledged claims, and a lost claim lets a retry run its operation again under a new operation id; set `synchronous_standby_names` (and `synchronous_commit = on`) on the primary (docs/storage.md, \"Replicated and sharded stores\")");
    }
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot take the migration lock", e))?;
    (&mut *conn)
        .execute(sqlx::raw_sql(concat!(
            "CREATE SCHEMA IF NOT EXISTS idem; \
             CREATE TABLE IF NOT EXISTS ",
            migrations_table!(),
            " (\
               version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
               installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, \
               checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)",
        )))
        .await
        .map_err(|e| migrate_error("cannot create schema `idem` and its history table", e))?;
    let applied = history(
        sqlx::query_as(concat!(
            "SELECT version, checksum, success FROM ",
            migrations_table!()
        ))
        .fetch_all(&mut *conn)
        .await,
        MIGRATIONS_TABLE,
    )?;
    for m in pending(&MIGRATOR, &applied, EARLIER_CHECKSUMS)? {
        let started = std::time::Instant::now();
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| migrate_error("cannot begin", e))?;
        (&mut *tx)
            .execute(sqlx::raw_sql(m.sql.clone()))
            .await
            .map_err(|e| migrate_error(&format!("migration {} failed", m.version), e))?;
        sqlx::query(concat!(
            "INSERT INTO ",
            migrations_table!(),
            " (version, description, success, checksum, execution_time) \
             VALUES ($1, $2, TRUE, $3, $4)",
        ))
        .bind(m.version)
        .bind(&*m.description)
        .bind(&*m.checksum)
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
        tx.commit()
            .await
            .map_err(|e| migrate_error("cannot commit the migration", e))?;
    }
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot release the migration lock", e))?;
    Ok(())
}
