//! `idem stats`: records by state (expired ones included until purged, and counted apart too),
//! the oldest processing record, expiries ahead, sizes.
//!
//! The rule: every figure is the database's, read when the command runs; `--json` prints
//! [`Stats`](crate::record::Stats) as it is.

use std::io::Write;

use crate::db::Db;
use crate::error::Error;
use crate::record::state_name;
use crate::time::time;

/// `idem stats`: counts, the oldest processing record, expiries ahead, sizes.
pub(crate) async fn stats(db: &Db, json: bool, out: &mut impl Write) -> Result<(), Error> {
    let s = db.stats().await?;
    if json {
        serde_json::to_writer(&mut *out, &s)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "records by state, expired ones included until purged:")?;
    for (state, n) in [(0, s.processing), (1, s.completed), (2, s.failed_stored)] {
        writeln!(out, "{:<14}{n}", state_name(state))?;
    }
    writeln!(
        out,
        "{:<14}{} (of the above, logically absent; `idem purge` deletes them)",
        "expired", s.expired
    )?;
    if s.remembered > 0 {
        writeln!(
            out,
            "{:<14}{} (of the above, past their TTL: answered 410 key-expired until their remember window ends)",
            "remembered", s.remembered
        )?;
    }
    match s.oldest_processing {
        Some(o) => writeln!(
            out,
            "oldest processing  {}, lease taken {}",
            o.key_hash,
            time(o.locked_at, o.now)
        )?,
        None => writeln!(out, "oldest processing  -")?,
    }
    writeln!(out, "expiring in 1 h    {}", s.expiring_1h)?;
    writeln!(out, "expiring in 1 d    {}", s.expiring_1d)?;
    let size = |b: Option<i64>| b.map_or("-".to_owned(), |b| format!("{b} bytes"));
    let label = match db {
        Db::Lite(..) => "database file",
        _ => "table size",
    };
    writeln!(out, "{label:<19}{}", size(s.table_bytes))?;
    writeln!(out, "index size         {}", size(s.index_bytes))?;
    Ok(())
}
