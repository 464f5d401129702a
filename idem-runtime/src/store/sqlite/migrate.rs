//! The migrations of a [`SqliteStore`](super::SqliteStore), applied by idem's own runner.

use sqlx::Executor;
use sqlx::sqlite::SqliteConnection;

use super::statements::{MIGRATIONS_TABLE, migrations_table};
use crate::store::clock::{Clock, SystemClock};
use crate::store::error::StoreError;
use crate::store::migrate::{Applied, history, migrate_error, pending};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Applies the pending migrations on `conn`, its own connection.
///
/// A schema already up to date — every restart of an instance — is recognized from the history
/// alone, which a reader sees without waiting for any writer (WAL). Only pending migrations take
/// the write lock, `BEGIN IMMEDIATE`, so that two processes migrating together run one after the
/// other, and read the history again under it. Taking the lock first made an instance restarted
/// while others served traffic (on SQLite every claim is a write) queue behind their writers
/// until the busy timeout and fail with "database is locked": it did not start.
pub(super) async fn migrate_on(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    if up_to_date(conn).await? {
        return Ok(());
    }
    (&mut *conn)
        .execute(sqlx::raw_sql("BEGIN IMMEDIATE"))
        .await
        .map_err(|e| migrate_error("cannot lock the database for migrations", e))?;
    (&mut *conn)
        .execute(sqlx::raw_sql(concat!(
            "CREATE TABLE IF NOT EXISTS ",
            migrations_table!(),
            " (\
               version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
               installed_on INTEGER NOT NULL, success BOOLEAN NOT NULL, \
               checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
        )))
        .await
        .map_err(|e| migrate_error(concat!("cannot create ", migrations_table!()), e))?;
    let applied = read_history(conn).await?;
    for m in pending(&MIGRATOR, &applied, &[])? {
        let started = std::time::Instant::now();
        (&mut *conn)
            .execute(sqlx::raw_sql(m.sql.clone()))
            .await
            .map_err(|e| migrate_error(&format!("migration {} failed", m.version), e))?;
        sqlx::query(concat!(
            "INSERT INTO ",
            migrations_table!(),
            " (version, description, installed_on, success, checksum, execution_time) \
             VALUES (?1, ?2, ?3, TRUE, ?4, ?5)",
        ))
        .bind(m.version)
        .bind(&*m.description)
        .bind(SystemClock.now().as_millis())
        .bind(&*m.checksum)
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
    }
    (&mut *conn)
        .execute(sqlx::raw_sql("COMMIT"))
        .await
        .map_err(|e| migrate_error("cannot commit the migrations", e))?;
    Ok(())
}

/// `true` when idem's history exists and lists every migration of this build, read without a
/// lock. A history that records a failed or edited migration is the same error as under the
/// lock.
async fn up_to_date(conn: &mut SqliteConnection) -> Result<bool, StoreError> {
    let history: Option<i64> = sqlx::query_scalar(concat!(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '",
        migrations_table!(),
        "'",
    ))
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| migrate_error("cannot read the schema", e))?;
    if history.is_none() {
        return Ok(false);
    }
    let applied = read_history(conn).await?;
    Ok(pending(&MIGRATOR, &applied, &[])?.is_empty())
}

/// idem's migration history.
async fn read_history(conn: &mut SqliteConnection) -> Result<Vec<Applied>, StoreError> {
    history(
        sqlx::query_as(concat!(
            "SELECT version, checksum, success FROM ",
            migrations_table!()
        ))
        .fetch_all(conn)
        .await,
        MIGRATIONS_TABLE,
    )
}
