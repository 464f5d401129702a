//! `idem purge`: deletes expired records in batches, through the store's `purge_expired`, then
//! frees the responses of remembered records past their TTL (`purge_responses`).
//!
//! The rule: only expired records (and remembered responses past their TTL), one batch per
//! statement until a batch comes back short; a terminal gets one progress line, anything else
//! one line per batch.

use std::io::{IsTerminal, Write};

use clap::ArgMatches;

use crate::args::plural;
use crate::db::Db;
use crate::error::Error;

/// `idem purge`: deletes expired records `--batch` at a time, with progress.
pub(crate) async fn purge(db: &Db, m: &ArgMatches, out: &mut impl Write) -> Result<(), Error> {
    let expired = db.count_expired().await?;
    if m.get_flag("dry-run") {
        writeln!(
            out,
            "{} would be purged (dry run)",
            plural(expired, "expired record")
        )?;
        return Ok(());
    }
    let batch = *m.get_one::<u32>("batch").unwrap_or(&1000);
    let tty = std::io::stdout().is_terminal();
    let mut total = 0u64;
    loop {
        let n = db.store().purge_expired(batch).await?;
        total += n;
        if tty {
            write!(out, "\rpurged {total} / ~{expired}")?;
            out.flush()?;
        } else if n > 0 {
            writeln!(out, "purged {n} (total {total})")?;
        }
        if n < u64::from(batch) {
            break;
        }
    }
    if tty {
        writeln!(out)?;
    }
    writeln!(out, "purged {}", plural(total, "expired record"))?;
    // The first phase of remembered records: their responses past the TTL (none without
    // `remember`, and nothing printed then).
    let mut freed = 0u64;
    loop {
        let n = db.store().purge_responses(batch).await?;
        freed += n;
        if n < u64::from(batch) {
            break;
        }
    }
    if freed > 0 {
        writeln!(
            out,
            "freed {} past their TTL (the records stay until their remember window ends)",
            plural(freed, "remembered response")
        )?;
    }
    Ok(())
}
