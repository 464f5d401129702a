//! `idem migrate`: idem's own migrations, through the store's `migrate`.
//!
//! The rule: idempotent, so safe on every deploy; what was applied is the migration history's
//! difference between before and after.

use std::io::Write;

use crate::db::Db;
use crate::error::Error;

/// `idem migrate`: applies idem's migrations, prints each one applied.
pub(crate) async fn migrate(db: &Db, out: &mut impl Write) -> Result<(), Error> {
    let before = db.history().await.unwrap_or_default();
    db.store().migrate().await?;
    let after = db.history().await.unwrap_or_default();
    let mut applied = 0;
    for (version, description) in after.iter().filter(|a| !before.contains(a)) {
        writeln!(out, "applied {version} {description}")?;
        applied += 1;
    }
    if applied == 0 {
        writeln!(out, "nothing to apply: idem's schema is up to date")?;
    }
    Ok(())
}
