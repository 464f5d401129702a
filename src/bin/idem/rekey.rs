//! `idem rekey`: seals every live stored record under the key ring's primary key (or, with
//! `--unseal`, opens it back to plaintext), a batch at a time.
//!
//! The rule: a record is rewritten only while it is still the operation and the row version
//! read, so that `rekey` never overwrites what the service wrote meanwhile; a record the service
//! keeps writing is left to it, and it seals what it writes.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};

use clap::ArgMatches;
use idem::key::ScopedKey;
use idem::seal::{KeyRing, ResealError, SealError, StoredResponse};

use crate::args::{hex, parse_hash, plural};
use crate::db::Db;
use crate::error::Error;
use crate::record::{StoredRow, UNBOUND, binding};
use crate::redis::{RedisDb, Scan};

/// What `rekey` did, or with `--dry-run` would do.
#[derive(Default)]
struct Rekeyed {
    scanned: u64,
    /// Sealed under the primary by this run (with `--dry-run`: to be).
    resealed: u64,
    /// Of those, records that were plaintext.
    from_plaintext: u64,
    /// Already under the primary.
    current: u64,
    /// Changed by the service at each of our attempts: left to it.
    busy: u64,
    /// Records that do not open, with the first few key hashes and reasons.
    unopened: u64,
    first_unopened: Vec<(String, SealError)>,
}

impl Rekeyed {
    /// Counts the record `hash` as not opening, for `why`.
    fn unopen(&mut self, hash: &[u8], why: SealError) {
        self.unopened += 1;
        if self.first_unopened.len() < 5 {
            self.first_unopened.push((hex(hash), why));
        }
    }
}

/// How many times `rekey` reads a record again when the service wrote it between the read and
/// the rewrite.
const REKEY_ATTEMPTS: u32 = 3;

/// Where a run stands: after a key hash, in key-hash order, on the SQL stores; in a `SCAN` on
/// Redis, which has no key order.
enum Position<'a> {
    After(Vec<u8>),
    Scan(&'a RedisDb, Scan),
}

/// `idem rekey`: seals every live stored record under the key ring's primary key, `--batch` at
/// a time in key-hash order (so `--after` resumes where a run stopped), each rewrite guarded by
/// the row version read, so that it never overwrites what the service wrote meanwhile.
pub(crate) async fn rekey(
    db: &Db,
    m: &ArgMatches,
    ring: Option<&KeyRing>,
    out: &mut impl Write,
) -> Result<(), Error> {
    let Some(ring) = ring else {
        return Err(
            "rekey needs the key ring: set IDEM_ENCRYPTION_KEYS or pass --keys-file \
            (ID:BASE64,..., the new primary first, every older key after it)"
                .into(),
        );
    };
    let ring = mode(ring, m);
    let batch = *m.get_one::<u32>("batch").unwrap_or(&500);
    let dry_run = m.get_flag("dry-run");
    let mut position = start(db, m).await?;
    let total = match db {
        Db::Redis(_) => "?".to_owned(),
        _ => db.count_stored().await?.to_string(),
    };
    let tty = std::io::stdout().is_terminal();
    let mut done = Rekeyed::default();
    while let Some(rows) = next_page(db, &mut position, batch).await? {
        let before = done.resealed;
        for row in rows {
            rekey_one(db, &ring, row, dry_run, &mut done).await?;
        }
        progress(out, &position, &done, before, tty, &total)?;
    }
    if tty && done.scanned > 0 {
        writeln!(out)?;
    }
    report(out, &ring, &done, dry_run)
}

/// The ring as `rekey` uses it: as given, opening every response back to plaintext
/// (`--unseal`), or sealing plaintext records and records sealed in format 1 too
/// (`--accept-plaintext`).
fn mode<'a>(ring: &'a KeyRing, m: &ArgMatches) -> Cow<'a, KeyRing> {
    if m.get_flag("unseal") {
        Cow::Owned(ring.clone().sealing_nothing())
    } else if m.get_flag("accept-plaintext") {
        Cow::Owned(ring.clone().accepting_plaintext())
    } else {
        Cow::Borrowed(ring)
    }
}

/// Where a run starts: after `--after` (SQL stores only), at the first key hash, or at the start
/// of a `SCAN` on Redis.
async fn start<'a>(db: &'a Db, m: &ArgMatches) -> Result<Position<'a>, Error> {
    let cursor = match m.get_one::<String>("after") {
        Some(_) if matches!(db, Db::Redis(_)) => {
            return Err(
                "--after is for the SQL stores: on Redis, run rekey again (records \
                already under the primary are only read)"
                    .into(),
            );
        }
        Some(h) => parse_hash(h, "--after")?,
        None => Vec::new(),
    };
    Ok(match db {
        Db::Redis(r) => Position::Scan(r, r.scan().await?),
        _ => Position::After(cursor),
    })
}

/// The next records of the run, moving `position` past them; `None` once there are no more.
async fn next_page(
    db: &Db,
    position: &mut Position<'_>,
    batch: u32,
) -> Result<Option<Vec<StoredRow>>, Error> {
    match position {
        Position::Scan(redis, scan) => redis.next_page(scan, batch).await,
        Position::After(cursor) => {
            let rows = db.page(cursor, batch).await?;
            let Some(last) = rows.last() else {
                return Ok(None);
            };
            *cursor = last.key_hash.clone();
            Ok(Some(rows))
        }
    }
}

/// The progress after a batch: one line rewritten in place on a terminal, otherwise a line per
/// batch, ending with the key hash `--after` resumes from on the SQL stores.
fn progress(
    out: &mut impl Write,
    position: &Position<'_>,
    done: &Rekeyed,
    before: u64,
    tty: bool,
    total: &str,
) -> Result<(), Error> {
    if tty {
        write!(
            out,
            "\rscanned {} / ~{total}, resealed {}",
            done.scanned, done.resealed
        )?;
        out.flush()?;
        return Ok(());
    }
    match position {
        Position::Scan(..) => writeln!(
            out,
            "resealed {} (total {})",
            done.resealed - before,
            done.resealed
        )?,
        Position::After(cursor) => writeln!(
            out,
            "resealed {} (total {}), up to key hash {}",
            done.resealed - before,
            done.resealed,
            hex(cursor)
        )?,
    }
    Ok(())
}

/// What the run did, or with `--dry-run` would do; an error naming the first records that do
/// not open, if any.
fn report(
    out: &mut impl Write,
    ring: &KeyRing,
    done: &Rekeyed,
    dry_run: bool,
) -> Result<(), Error> {
    let verb = if dry_run { "would reseal" } else { "resealed" };
    if ring.seals() {
        writeln!(
            out,
            "{verb} {} of {} under key `{}` ({} of them plaintext); {} already \
             were",
            done.resealed,
            plural(done.scanned, "stored record"),
            ring.primary(),
            done.from_plaintext,
            done.current
        )?;
    } else {
        let verb = if dry_run { "would open" } else { "opened" };
        writeln!(
            out,
            "{verb} {} of {} back to plaintext; {} already were",
            done.resealed,
            plural(done.scanned, "stored record"),
            done.current
        )?;
    }
    if done.busy > 0 {
        writeln!(
            out,
            "{} changed at each attempt and were left to the service, which seals what it \
             writes: run rekey again to check",
            plural(done.busy, "record")
        )?;
    }
    if let Some((hash, why)) = done.first_unopened.first() {
        return Err(format!(
            "{} {} not open and {} left as {} (first: {hash}: {why}); see {} with \
             `idem inspect --key-hash`",
            plural(done.unopened, "record"),
            if done.unopened == 1 { "does" } else { "do" },
            if done.unopened == 1 { "was" } else { "were" },
            if done.unopened == 1 {
                "it is"
            } else {
                "they are"
            },
            if done.unopened == 1 { "it" } else { "them" }
        )
        .into());
    }
    Ok(())
}

/// One record of `rekey`: re-read and tried again while the service writes it in between.
async fn rekey_one(
    db: &Db,
    ring: &KeyRing,
    mut row: StoredRow,
    dry_run: bool,
    done: &mut Rekeyed,
) -> Result<(), Error> {
    done.scanned += 1;
    for _ in 0..REKEY_ATTEMPTS {
        let Some(new) = reseal(ring, &mut row, done)? else {
            return Ok(());
        };
        if dry_run || db.rewrite(&row, &new.key, &new.response).await? {
            done.resealed += 1;
            done.from_plaintext += u64::from(new.plaintext);
            return Ok(());
        }
        // The service wrote the record since it was read (a completion after an expiry, an
        // operator's expire): read it again. Gone, or no longer stored: nothing to seal.
        match db.stored_row(&new.hash).await? {
            Some(again) => row = again,
            None => return Ok(()),
        }
    }
    done.busy += 1;
    Ok(())
}

/// A record's response sealed anew, and what to write with it.
struct Resealed {
    hash: [u8; 32],
    /// The readable key to write with it.
    key: String,
    response: StoredResponse,
    /// The record was plaintext.
    plaintext: bool,
}

/// The response of `row` (taken out of it) under `ring`; `None` when there is nothing to write:
/// the record is under the primary already, or does not open (both counted in `done`).
fn reseal(
    ring: &KeyRing,
    row: &mut StoredRow,
    done: &mut Rekeyed,
) -> Result<Option<Resealed>, Error> {
    let stored = StoredResponse {
        headers: row.resp_headers.take().unwrap_or_default(),
        body: row.resp_body.take().unwrap_or_default(),
        biz_no: row.biz_no.take(),
    };
    let hash: [u8; 32] = row.key_hash.as_slice().try_into()?;
    let plaintext = matches!(stored.sealed_under(), Ok(None));
    let Some(binding) = binding(
        &row.operation_id,
        &row.request_hash,
        row.resp_status,
        row.state,
    ) else {
        done.unopen(&hash, SealError::Malformed(UNBOUND.to_owned()));
        return Ok(None);
    };
    let response = match ring.reseal_stored(&hash, &binding, &stored) {
        Ok(Some(new)) => new,
        Ok(None) => {
            done.current += 1;
            return Ok(None);
        }
        Err(ResealError::Open(e)) => {
            done.unopen(&hash, e);
            return Ok(None);
        }
        Err(e @ ResealError::Random(_)) => return Err(e.into()),
    };
    let key = if plaintext && ring.seals() {
        // As an encrypting handle writes it; a key that does not read as one (written by
        // hand) becomes the bare key hash rather than stay readable.
        ScopedKey::opaque_readable(&row.idem_key, &hash)
            .unwrap_or_else(|| format!("sealed:{}", hex(&hash)))
    } else {
        row.idem_key.clone()
    };
    Ok(Some(Resealed {
        hash,
        key,
        response,
        plaintext,
    }))
}
