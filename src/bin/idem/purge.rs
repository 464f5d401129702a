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
    let store = db.store();
    let total = in_batches(out, tty, batch, "purged", Some(expired), || {
        store.purge_expired(batch)
    })
    .await?;
    writeln!(out, "purged {}", plural(total, "expired record"))?;
    // The first phase of remembered records: their responses past the TTL (none without
    // `remember`, and nothing printed then).
    let freed = in_batches(out, tty, batch, "freed", None, || {
        store.purge_responses(batch)
    })
    .await?;
    if freed > 0 {
        writeln!(
            out,
            "freed {} past their TTL (the records stay until their remember window ends)",
            plural(freed, "remembered response")
        )?;
    }
    Ok(())
}

/// Runs `phase` until a batch comes back short, with its progress: one `\r` line on a terminal
/// (`<verb> <total> / ~<expected>` when the total is known), otherwise one line per batch that
/// did something. Returns the total.
async fn in_batches<F, Fut>(
    out: &mut impl Write,
    tty: bool,
    batch: u32,
    verb: &str,
    expected: Option<i64>,
    mut phase: F,
) -> Result<u64, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, idem::store::StoreError>>,
{
    let mut total = 0u64;
    loop {
        let n = phase().await?;
        total += n;
        if tty && (n > 0 || expected.is_some()) {
            match expected {
                Some(expected) => write!(out, "\r{verb} {total} / ~{expected}")?,
                None => write!(out, "\r{verb} {total}")?,
            }
            out.flush()?;
        } else if n > 0 {
            writeln!(out, "{verb} {n} (total {total})")?;
        }
        if n < u64::from(batch) {
            break;
        }
    }
    if tty && (total > 0 || expected.is_some()) {
        writeln!(out)?;
    }
    Ok(total)
}
