//! `idem release` and `idem expire`: the operator's actions on one record.
//!
//! The rule: the record changes only while it is still the operation `--operation-id` at
//! `--fence` that `inspect` showed; otherwise the error says what changed since.

use std::io::Write;

use clap::ArgMatches;

use crate::args::{hex, key_hash, no_record};
use crate::db::{Action, Db};
use crate::error::Error;
use crate::record::state_name;

/// `idem release` / `idem expire`: the action on the record while it is still the operation
/// `--operation-id` at `--fence`; otherwise, why not. Never by the fence alone: a record purged
/// and claimed afresh starts again at fence 1, under another operation.
pub(crate) async fn operate(
    db: &Db,
    m: &ArgMatches,
    action: Action,
    out: &mut impl Write,
) -> Result<(), Error> {
    let hash = key_hash(m)?;
    let fence = *m.get_one::<i64>("fence").unwrap_or(&0);
    let operation_id = m
        .get_one::<String>("operation-id")
        .map_or("", String::as_str);
    if db.operate(action, &hash, operation_id, fence).await? == 1 {
        let done = match action {
            Action::Release => "lease ended",
            Action::Expire => "expired",
        };
        writeln!(out, "{done}: {} (fence {fence})", hex(&hash))?;
        return Ok(());
    }
    Err(match db.inspect(&hash).await? {
        None => no_record(m, &hash),
        Some(r) if r.operation_id != operation_id => format!(
            "the record is another operation since you inspected it (operation id now {}): \
             the one you saw is gone; inspect it again",
            r.operation_id
        ),
        Some(r) if r.fence != fence => format!(
            "the record changed since you inspected it (fence now {})",
            r.fence
        ),
        Some(r) => format!(
            "the record is {}, not processing: only a processing record has a lease to end",
            state_name(r.state)
        ),
    }
    .into())
}
