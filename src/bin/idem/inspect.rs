//! `idem inspect`: one record, as lines or (`--json`) one object.
//!
//! The rule: of a sealed response, only what the key ring opens is printed; without a ring, or
//! when the response does not open, the rest of the record and why.

use std::io::Write;

use clap::ArgMatches;
use idem::seal::KeyRing;

use crate::args::{hex, key_hash, no_record};
use crate::db::Db;
use crate::error::Error;
use crate::record::{View, state_name};
use crate::time::time;

/// `idem inspect`: one record, as lines or (`--json`) one object.
pub(crate) async fn inspect(
    db: &Db,
    m: &ArgMatches,
    ring: Option<&KeyRing>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Error> {
    let hash = key_hash(m)?;
    let key_hash = hex(&hash);
    let Some(r) = db.inspect(&hash).await? else {
        return Err(no_record(m, &hash).into());
    };
    let with_body = m.get_flag("body");
    let view = View::of(&r, &hash, ring);
    if json {
        serde_json::to_writer(&mut *out, &r.json(&key_hash, with_body, &view))?;
        writeln!(out)?;
        return Ok(());
    }
    let expired = if r.expired() {
        " (expired)"
    } else if r.remembered() {
        " (remembered: its response expired, retries are answered 410 key-expired)"
    } else {
        ""
    };
    writeln!(out, "key           {}", r.key)?;
    writeln!(out, "key hash      {key_hash}")?;
    writeln!(out, "state         {}{expired}", state_name(r.state))?;
    writeln!(out, "fence         {}", r.fence)?;
    writeln!(out, "operation id  {}", r.operation_id)?;
    writeln!(out, "lease until   {}", time(r.lease_until, r.now))?;
    if let Some(at) = r.replay_until() {
        let freed = if r.response_freed() {
            " (response freed by the purge)"
        } else {
            ""
        };
        writeln!(out, "replay until  {}{freed}", time(at, r.now))?;
        writeln!(out, "remember until {}", time(r.expire_at, r.now))?;
    } else {
        writeln!(out, "expire at     {}", time(r.expire_at, r.now))?;
    }
    writeln!(out, "created at    {}", time(r.created_at, r.now))?;
    writeln!(out, "updated at    {}", time(r.updated_at, r.now))?;
    writeln!(out, "request hash  {}", r.request_hash.trim())?;
    let status = r.status.map_or("-".to_owned(), |s| s.to_string());
    writeln!(out, "status        {status}")?;
    if let Some(id) = &view.sealed_under {
        writeln!(out, "sealed under  key `{id}`")?;
    }
    if let Some(why) = &view.unopened {
        writeln!(out, "unreadable    {why}")?;
        writeln!(out, "business no   -")?;
        let len = r.body.as_ref().map_or(0, Vec::len);
        writeln!(out, "body          {len} bytes sealed")?;
        return Ok(());
    }
    let (biz_no, body) = match view.opened {
        Some(o) => (o.biz_no, o.body),
        None => (r.biz_no, r.body.unwrap_or_default()),
    };
    writeln!(out, "business no   {}", biz_no.as_deref().unwrap_or("-"))?;
    if with_body {
        writeln!(out, "body ({} bytes):", body.len())?;
        out.write_all(&body)?;
        writeln!(out)?;
    } else {
        writeln!(out, "body          {} bytes (--body to print)", body.len())?;
    }
    Ok(())
}
