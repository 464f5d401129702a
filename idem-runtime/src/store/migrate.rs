//! The migration plan shared by the SQL stores.
//!
//! The SQL files under `idem-runtime/migrations/{postgres,mysql,sqlite}/` (inside the crate, so
//! that it can be published with them) are embedded with `sqlx::migrate!`,
//! but applied by idem's own small runner: sqlx 0.8's `Migrator` always records its history in
//! `_sqlx_migrations` of the current schema, the very table the application's own migrations
//! use (apalis users hit `VersionMissing` that way). idem keeps its history in
//! `idem._sqlx_migrations` (PostgreSQL) or `idem_sqlx_migrations` (MySQL, SQLite), with the same
//! columns as sqlx's table.

use sqlx::migrate::{Migration, Migrator};

use super::StoreError;

/// One row of idem's migration history.
pub(crate) struct Applied {
    pub version: i64,
    pub checksum: Vec<u8>,
    pub success: bool,
}

/// The migrations of `migrator` not yet in `applied`, in order.
///
/// # Errors
/// [`StoreError::Migrate`] when an applied migration failed half-way (`success = false`) or was
/// edited after it was applied (checksum mismatch). Versions unknown to this build (written by a
/// newer idem) are tolerated, so that an older build can run during a rolling deploy.
pub(crate) fn pending<'m>(
    migrator: &'m Migrator,
    applied: &[Applied],
) -> Result<Vec<&'m Migration>, StoreError> {
    let mut out = Vec::new();
    for m in migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
    {
        match applied.iter().find(|a| a.version == m.version) {
            None => out.push(m),
            Some(a) if !a.success => {
                return Err(StoreError::Migrate {
                    message: format!(
                        "idem migration {} ({}) is recorded as failed: repair the schema by hand, then delete its history row",
                        m.version, m.description
                    ),
                    source: None,
                });
            }
            Some(a) if a.checksum != *m.checksum => {
                return Err(StoreError::Migrate {
                    message: format!(
                        "idem migration {} ({}) was applied with another checksum: the database was migrated by a different idem build",
                        m.version, m.description
                    ),
                    source: None,
                });
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

/// idem's history as read by `SELECT version, checksum, success FROM <table>` (`rows`), or the
/// error of that read.
pub(crate) fn history(
    rows: Result<Vec<(i64, Vec<u8>, bool)>, sqlx::Error>,
    table: &str,
) -> Result<Vec<Applied>, StoreError> {
    Ok(rows
        .map_err(|e| migrate_error(&format!("cannot read {table}"), e))?
        .into_iter()
        .map(|(version, checksum, success)| Applied {
            version,
            checksum,
            success,
        })
        .collect())
}

/// Wraps a driver error of the migration runner.
pub(crate) fn migrate_error(what: &str, err: sqlx::Error) -> StoreError {
    StoreError::Migrate {
        message: what.to_owned(),
        source: Some(Box::new(err)),
    }
}
