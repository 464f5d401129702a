//! The migration plan shared by the SQL stores: the files of
//! `idem-runtime/migrations/{postgres,mysql,sqlite}/`, embedded with `sqlx::migrate!` and
//! applied by idem's own runner (each backend's `migrate` module).
//!
//! The rule: idem's history lives in its own table (`idem._sqlx_migrations`,
//! `idem_sqlx_migrations`), never in the application's `_sqlx_migrations`.
//!
//! Why not sqlx's `Migrator`: `docs/storage.md`, "Where the tables live".

use sqlx::migrate::{Migration, Migrator};

use super::error::StoreError;

/// One row of idem's migration history.
#[derive(Clone)]
pub(crate) struct Applied {
    pub version: i64,
    pub checksum: Vec<u8>,
    pub success: bool,
}

/// The migrations of `migrator` not yet in `applied`, in order. `earlier` lists, as
/// `(version, SHA-384 in hex)`, the checksums that earlier idem releases recorded for migration
/// files edited since in ways that leave the database the same: those are accepted as the
/// file's own.
///
/// # Errors
/// [`StoreError::Migrate`] when an applied migration failed half-way (`success = false`) or was
/// edited after it was applied (checksum mismatch). Versions unknown to this build (written by a
/// newer idem) are tolerated, so that an older build can run during a rolling deploy.
pub(crate) fn pending<'m>(
    migrator: &'m Migrator,
    applied: &[Applied],
    earlier: &[(i64, &str)],
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
            Some(a)
                if a.checksum != *m.checksum
                    && !earlier
                        .iter()
                        .any(|&(v, sum)| v == m.version && sum == hex(&a.checksum)) =>
            {
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

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(version: i64, checksum: Vec<u8>) -> Applied {
        Applied {
            version,
            checksum,
            success: true,
        }
    }

    #[test]
    #[cfg(feature = "sqlite")]
    fn earlier_checksums_are_accepted_and_only_those() {
        static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");
        let m = MIGRATOR.iter().next().unwrap();
        // The later migrations, applied as they are.
        let later: Vec<Applied> = MIGRATOR
            .iter()
            .skip(1)
            .map(|m| applied(m.version, m.checksum.to_vec()))
            .collect();
        let with_later = |first: Applied| [vec![first], later.clone()].concat();
        let own = applied(m.version, m.checksum.to_vec());
        assert!(
            pending(&MIGRATOR, &with_later(own), &[])
                .unwrap()
                .is_empty()
        );
        let old = applied(m.version, vec![0xab; 48]);
        assert!(pending(&MIGRATOR, &with_later(old.clone()), &[]).is_err());
        let earlier = [(m.version, "ab".repeat(48))];
        let earlier: Vec<(i64, &str)> = earlier.iter().map(|(v, s)| (*v, s.as_str())).collect();
        assert!(
            pending(&MIGRATOR, &with_later(old), &earlier)
                .unwrap()
                .is_empty()
        );
        let other = applied(m.version, vec![0xcd; 48]);
        assert!(pending(&MIGRATOR, &with_later(other), &earlier).is_err());
        assert_eq!(
            pending(&MIGRATOR, &[], &earlier).unwrap().len(),
            MIGRATOR.iter().count()
        );
    }
}
