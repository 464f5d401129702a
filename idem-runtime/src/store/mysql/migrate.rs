//! The migrations of a [`MySqlStore`](super::MySqlStore), applied by idem's own runner.

use sqlx::Executor;
use sqlx::mysql::MySqlConnection;

use super::statements::{MIGRATIONS_TABLE, migrations_table};
use crate::store::clock::{Clock, SystemClock};
use crate::store::error::StoreError;
use crate::store::migrate::{history, migrate_error, pending};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/mysql");

/// Applies the pending migrations on `conn`, its own connection: `GET_LOCK` is session-scoped
/// and serializes concurrent migrations.
pub(super) async fn migrate_on(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('idem_migrate', 60)")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot take the migration lock", e))?;
    if locked != Some(1) {
        return Err(StoreError::Migrate {
            message: "another process held the idem migration lock for 60 s".to_owned(),
            source: None,
        });
    }
    (&mut *conn)
        .execute(sqlx::raw_sql(concat!(
            "CREATE TABLE IF NOT EXISTS ",
            migrations_table!(),
            " (\
               version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
               installed_on BIGINT NOT NULL, success BOOLEAN NOT NULL, \
               checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
        )))
        .await
        .map_err(|e| migrate_error(concat!("cannot create ", migrations_table!()), e))?;
    let applied = history(
        sqlx::query_as(concat!(
            "SELECT version, checksum, success FROM ",
            migrations_table!()
        ))
        .fetch_all(&mut *conn)
        .await,
        MIGRATIONS_TABLE,
    )?;
    for m in pending(&MIGRATOR, &applied, &[])? {
        // DDL commits implicitly in MySQL: record the attempt first, mark it done after, so a
        // migration that died half-way is visible as `success = FALSE` (as sqlx does).
        let started = std::time::Instant::now();
        sqlx::query(concat!(
            "INSERT INTO ",
            migrations_table!(),
            " (version, description, installed_on, success, checksum, execution_time) \
             VALUES (?, ?, ?, FALSE, ?, -1)",
        ))
        .bind(m.version)
        .bind(&*m.description)
        .bind(SystemClock.now().as_millis())
        .bind(&*m.checksum)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
        (&mut *conn)
            .execute(sqlx::raw_sql(m.sql.clone()))
            .await
            .map_err(|e| migrate_error(&format!("migration {} failed", m.version), e))?;
        sqlx::query(concat!(
            "UPDATE ",
            migrations_table!(),
            " SET success = TRUE, execution_time = ? WHERE version = ?",
        ))
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .bind(m.version)
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot record the migration", e))?;
    }
    sqlx::query("SELECT RELEASE_LOCK('idem_migrate')")
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot release the migration lock", e))?;
    Ok(())
}
