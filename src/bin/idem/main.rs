//! `idem`: the operator's command-line tool for idem's SQL stores (PostgreSQL, MariaDB/MySQL,
//! SQLite). `docs/operations.md`, "The `idem` CLI".
//!
//! What the `Store` trait offers (`migrate`, `purge_expired`) goes through it; what it lacks
//! (reading a record by its key hash, statistics, operator actions) is each store's operator
//! statements (`idem::store::<backend>::sql`), with bind parameters only. Every "now" is the
//! database's clock, the stores' own expression (`NOW_MS_SQL`). Sealed responses are opened and
//! sealed by `idem::seal` (`KeyRing::open_stored`, `KeyRing::reseal_stored`), never here.
//!
//! `cli` builds the command line and `args` reads what it names (a record's key hash, the key
//! ring); `db` connects a store and sends its statements, `redis` does `rekey`'s part on Redis,
//! `record` holds what they read and its JSON, `time` formats times; one module per command does
//! the rest (`migrate`, `purge`, `inspect`, `stats`, `operate` for `release` and `expire`,
//! `rekey`), and `error` is the one line an error prints as.

mod args;
mod cli;
mod db;
mod error;
mod inspect;
mod migrate;
mod operate;
mod purge;
mod record;
mod redis;
mod rekey;
mod stats;
mod time;

use std::process::ExitCode;

use clap::ArgMatches;
use clap::error::ErrorKind;

use crate::db::{Action, Db};
use crate::error::{Error, one_line, unmigrated, usage_error};

/// Connects the store `--database-url` names and runs the subcommand on it.
async fn run(m: ArgMatches) -> Result<(), Error> {
    let positional = m
        .subcommand()
        .and_then(|(_, sub)| sub.get_one::<String>("database"));
    let Some(url) = positional.or_else(|| m.get_one::<String>("database-url")) else {
        return Err(
            "no database: pass --database-url URL (or the URL after the command) or set \
             DATABASE_URL"
                .into(),
        );
    };
    let prefix = m
        .subcommand()
        .and_then(|(_, sub)| sub.try_get_one::<String>("redis-prefix").ok().flatten())
        .map_or("idem:", String::as_str);
    let db = Db::connect(url, prefix).await?;
    let out = &mut std::io::stdout().lock();
    let done = match m.subcommand() {
        Some(("migrate", _)) => migrate::migrate(&db, out).await,
        Some(("purge", sub)) => purge::purge(&db, sub, out).await,
        Some(("inspect", sub)) => {
            let (ring, json) = (args::key_ring(sub)?, sub.get_flag("json"));
            inspect::inspect(&db, sub, ring.as_ref(), json, out).await
        }
        Some(("rekey", sub)) => rekey::rekey(&db, sub, args::key_ring(sub)?.as_ref(), out).await,
        Some(("stats", sub)) => stats::stats(&db, sub.get_flag("json"), out).await,
        Some(("release", sub)) => operate::operate(&db, sub, Action::Release, out).await,
        Some(("expire", sub)) => operate::operate(&db, sub, Action::Expire, out).await,
        _ => unreachable!("clap requires a subcommand"),
    };
    done.map_err(unmigrated)
}

fn main() -> ExitCode {
    let matches = match cli::cli().try_get_matches() {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::DisplayHelp || e.kind() == ErrorKind::DisplayVersion => {
            e.exit()
        }
        // `idem` alone: the help, and the exit code of an error.
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("{}", usage_error(&e));
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(matches)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}
