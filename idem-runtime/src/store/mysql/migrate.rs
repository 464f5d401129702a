//! The migrations of a [`MySqlStore`](super::MySqlStore), applied by idem's own runner.

use sqlx::Executor;
use sqlx::mysql::MySqlConnection;

use super::statements::{MIGRATIONS_TABLE, migrations_table};
use crate::store::clock::{Clock, SystemClock};
use crate::store::error::StoreError;
use crate::store::migrate::{history, migrate_error, pending};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/mysql");

/// How long a migrator waits for a migration another one recorded first to be done.
const OTHERS_MIGRATION: core::time::Duration = core::time::Duration::from_secs(60);

/// Applies the pending migrations on `conn`, its own connection: `GET_LOCK` is session-scoped
/// and serializes concurrent migrations on one server. On a Galera cluster that lock would be
/// each node's own (and some MariaDB releases refuse it there), so it is not taken: the history
/// row each migrator writes before a migration's DDL is the claim, the cluster lets one `INSERT`
/// of a version through, and the other migrators (duplicate key, or their write rolled back at
/// certification) wait until the winner marks the version done, and go on with the next.
/// `causal`: whether the store was told it is on a Galera node (it warns when it was not).
///
/// On a Galera node another migrator's DDL (in the cluster's total order) rolls back any
/// statement that touches its table meanwhile, reads of the schema included (1213): the
/// migration is then started over, up to 60 s. Such a statement never comes after this
/// migrator's own history row (its DDL is not rolled back so, and marking it done is retried
/// on its own), so starting over finds nothing of this migrator's half-done.
pub(super) async fn migrate_on(conn: &mut MySqlConnection, causal: bool) -> Result<(), StoreError> {
    let galera = super::is_galera(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot ask the server whether it is a Galera node", e))?;
    if galera && !causal {
        tracing::warn!(
            target: "idem",
            "the MariaDB server is a node of a Galera cluster, and the store was not told so: \
             its statements are not causal; make it with MySqlStore::connect, or call \
             .with_galera(true) on a store made with from_pool"
        );
    }
    let started = std::time::Instant::now();
    loop {
        match migrate_once(conn, galera).await {
            Err(e) if galera && rolled_back(&e) && started.elapsed() < OTHERS_MIGRATION => {
                tokio::time::sleep(core::time::Duration::from_millis(50)).await;
            }
            done => return done,
        }
    }
}

/// Whether `e` is a statement the server rolled back (1213).
fn rolled_back(e: &StoreError) -> bool {
    let StoreError::Migrate {
        source: Some(source),
        ..
    } = e
    else {
        return false;
    };
    source
        .downcast_ref::<sqlx::Error>()
        .is_some_and(|e| super::error_number(e) == Some(1213))
}

async fn migrate_once(conn: &mut MySqlConnection, galera: bool) -> Result<(), StoreError> {
    if !galera {
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
    }
    // On a Galera node every DDL runs in the cluster's total order and rolls back the other
    // nodes' writes to its table (a migrator marking a version done): sent only when needed.
    let exists = galera
        && 0 < sqlx::query_scalar::<_, i64>(concat!(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = '",
            migrations_table!(),
            "'"
        ))
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot read the schema", e))?;
    if !exists {
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
    }
    let started = std::time::Instant::now();
    let applied = loop {
        let applied = history(
            sqlx::query_as(concat!(
                "SELECT version, checksum, success FROM ",
                migrations_table!()
            ))
            .fetch_all(&mut *conn)
            .await,
            MIGRATIONS_TABLE,
        )?;
        // On one server the lock leaves no migration half-way but one that died so (`pending`
        // refuses it); on a cluster, a migrator on another node may be running it.
        if !galera || applied.iter().all(|m| m.success) || started.elapsed() > OTHERS_MIGRATION {
            break applied;
        }
        tokio::time::sleep(core::time::Duration::from_millis(50)).await;
    };
    for m in pending(&MIGRATOR, &applied, &[])? {
        // DDL commits implicitly in MySQL: record the attempt first, mark it done after, so a
        // migration that died half-way is visible as `success = FALSE` (as sqlx does).
        let started = std::time::Instant::now();
        if !record(conn, m).await? {
            continue;
        }
        (&mut *conn)
            .execute(sqlx::raw_sql(m.sql.clone()))
            .await
            .map_err(|e| migrate_error(&format!("migration {} failed", m.version), e))?;
        let took = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        // On a Galera node another node's DDL (a migrator creating the history table, under
        // total order isolation) rolls back a write to that table with 1213: marking the
        // version done has no other effect, so it is sent again.
        let marking = std::time::Instant::now();
        loop {
            let marked = sqlx::query(concat!(
                "UPDATE ",
                migrations_table!(),
                " SET success = TRUE, execution_time = ? WHERE version = ?",
            ))
            .bind(took)
            .bind(m.version)
            .execute(&mut *conn)
            .await;
            match marked {
                Err(e)
                    if super::error_number(&e) == Some(1213)
                        && marking.elapsed() < OTHERS_MIGRATION =>
                {
                    tokio::time::sleep(core::time::Duration::from_millis(50)).await;
                }
                marked => {
                    marked.map_err(|e| migrate_error("cannot record the migration", e))?;
                    break;
                }
            }
        }
    }
    if !galera {
        release(conn).await?;
    }
    Ok(())
}

async fn release(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    sqlx::query("SELECT RELEASE_LOCK('idem_migrate')")
        .execute(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot release the migration lock", e))?;
    Ok(())
}

/// Records the start of migration `m` in the history: `true` once recorded by this migrator,
/// `false` once another migrator (on another node of a cluster, or since this one read the
/// history) recorded it and marked it done.
async fn record(
    conn: &mut MySqlConnection,
    m: &sqlx::migrate::Migration,
) -> Result<bool, StoreError> {
    let started = std::time::Instant::now();
    loop {
        let recorded = sqlx::query(concat!(
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
        .await;
        match recorded {
            Ok(_) => return Ok(true),
            // A duplicate, or a write the cluster rolled back at certification (or a deadlock):
            // whose row is it, and is it done?
            Err(e) if matches!(super::error_number(&e), Some(1062 | 1213)) => {}
            Err(e) => return Err(migrate_error("cannot record the migration", e)),
        }
        let row: Option<(bool, Vec<u8>)> = sqlx::query_as(concat!(
            "SELECT success, checksum FROM ",
            migrations_table!(),
            " WHERE version = ?"
        ))
        .bind(m.version)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| migrate_error("cannot read the migration history", e))?;
        if let Some((true, checksum)) = row {
            if checksum != *m.checksum {
                return Err(StoreError::Migrate {
                    message: format!(
                        "migration {} was applied by another migrator from a different text \
                         (its checksum differs): run one build of idem against a database",
                        m.version
                    ),
                    source: None,
                });
            }
            return Ok(false);
        }
        if started.elapsed() > OTHERS_MIGRATION {
            return Err(StoreError::Migrate {
                message: format!(
                    "migration {} was recorded by another migrator (on another node of the \
                     cluster) and is not done after {OTHERS_MIGRATION:?}: if that migrator died \
                     half-way, finish or undo the migration by hand and fix its row in {MIGRATIONS_TABLE}",
                    m.version
                ),
                source: None,
            });
        }
        // Not done yet (its DDL runs), or not there (a deadlock, no other migrator): try again.
        tokio::time::sleep(core::time::Duration::from_millis(50)).await;
    }
}
