//! The command line: the `idem` command, its global options and one builder per subcommand
//! (clap's builder API).
//!
//! The rule: what the command line says is what `idem --help` prints; options that several
//! subcommands share (a record's key, its identity) are built once, in the order they print.

use clap::{Arg, ArgAction, Command};

/// The `idem` command: the global options, then the subcommands in the order `--help` lists
/// them.
pub(crate) fn cli() -> Command {
    Command::new("idem")
        .about(
            "Operate idem's idempotency records (PostgreSQL, MariaDB/MySQL, SQLite; Redis for \
             migrate, purge and rekey)",
        )
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .arg_required_else_help(true)
        .args(global_args())
        .subcommands(
            [
                migrate(),
                purge(),
                inspect(),
                rekey(),
                stats(),
                release(),
                expire(),
            ]
            .map(database_arg),
        )
}

/// The database as the subcommand's positional argument, beside `--database-url`:
/// `idem stats ./payments.db`.
fn database_arg(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("database")
            .value_name("DATABASE_URL")
            .help("The database, instead of --database-url: a URL, or a SQLite file's path"),
    )
}

/// The option every subcommand takes: the database.
fn global_args() -> [Arg; 1] {
    [Arg::new("database-url")
        .long("database-url")
        .env("DATABASE_URL")
        .value_name("URL")
        .global(true)
        .help(
            "postgres://..., mysql://... (MariaDB too), redis://..., or SQLite: a file's \
             path or sqlite://path (sqlx's forms, ?mode=rwc too)",
        )]
}

/// `--redis-prefix`, on the commands that run on Redis: `migrate`, `purge` and `rekey`.
fn redis_prefix_arg() -> Arg {
    Arg::new("redis-prefix")
        .long("redis-prefix")
        .value_name("PREFIX")
        .help("Redis: the store's key prefix (`RedisStore::with_prefix`), idem: unless set")
}

/// `--keys-file`, on the commands that open stored responses: `inspect` and `rekey`.
fn keys_file_arg() -> Arg {
    Arg::new("keys-file")
        .long("keys-file")
        .value_name("PATH")
        .help(
            "A file holding the key ring, ID:BASE64,... with the primary first (or set \
             IDEM_ENCRYPTION_KEYS)",
        )
}

fn migrate() -> Command {
    Command::new("migrate")
        .about("Apply idem's own migrations (idempotent) and print what was applied")
        .arg(redis_prefix_arg())
}

fn purge() -> Command {
    Command::new("purge")
        .about("Delete expired records in batches")
        .arg(redis_prefix_arg())
        .arg(
            Arg::new("batch")
                .long("batch")
                .value_name("N")
                .default_value("1000")
                .value_parser(clap::value_parser!(u32).range(1..))
                .help("Records per DELETE"),
        )
        .arg(
            Arg::new("dry-run")
                .long("dry-run")
                .action(ArgAction::SetTrue)
                .help("Only count the expired records"),
        )
}

fn inspect() -> Command {
    key_args(
        Command::new("inspect")
            .about("Show one record, by scope parts + operation + key or by --key-hash"),
    )
    .arg(
        Arg::new("body")
            .long("body")
            .action(ArgAction::SetTrue)
            .help("Also print the stored response body"),
    )
    .arg(json_arg())
    .arg(keys_file_arg())
}

fn rekey() -> Command {
    Command::new("rekey")
        .about(
            "Seal every stored response under the key ring's primary key (plaintext \
             ones too), in batches; safe while the service runs, resumable",
        )
        .arg(redis_prefix_arg())
        .arg(keys_file_arg())
        .arg(
            Arg::new("batch")
                .long("batch")
                .value_name("N")
                .default_value("500")
                .value_parser(clap::value_parser!(u32).range(1..))
                .help("Records read per statement"),
        )
        .arg(
            Arg::new("after")
                .long("after")
                .value_name("HEX")
                .help("Start after this key hash (the last one a stopped run printed)"),
        )
        .arg(
            Arg::new("dry-run")
                .long("dry-run")
                .action(ArgAction::SetTrue)
                .help("Only count what would be sealed"),
        )
        .arg(
            Arg::new("accept-plaintext")
                .long("accept-plaintext")
                .action(ArgAction::SetTrue)
                .conflicts_with("unseal")
                .help(
                    "Seal plaintext records and records sealed in format 1 too (while \
                     switching encryption on); without it they are named as not opening",
                ),
        )
        .arg(
            Arg::new("unseal")
                .long("unseal")
                .action(ArgAction::SetTrue)
                .help(
                    "Open every sealed response back to plaintext instead, with the \
                     ring's keys (switching encryption off)",
                ),
        )
}

fn stats() -> Command {
    Command::new("stats")
        .about("Records by state, the oldest processing record, expiries ahead, table size")
        .arg(json_arg())
}

/// `--json`, on the commands that print a record or figures: `inspect` and `stats`.
fn json_arg() -> Arg {
    Arg::new("json")
        .long("json")
        .action(ArgAction::SetTrue)
        .help("One JSON object instead of lines")
}

fn release() -> Command {
    identity_args(key_args(Command::new("release").about(
        "End the lease of a stuck processing record: the next retry of the same request \
         takes over, with the same operation id",
    )))
}

fn expire() -> Command {
    identity_args(key_args(Command::new("expire").about(
        "Expire a record now (stuck or poisoned): the key is free, the next request runs \
         afresh under a new operation id",
    )))
}

fn key_args(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("scope")
            .long("scope")
            .value_name("PART")
            .action(ArgAction::Append)
            .help("A scope part (tenant, user, ...), in order; repeat for each"),
    )
    .arg(
        Arg::new("operation")
            .long("operation")
            .value_name("OP")
            .requires("key")
            .help("The operation the key is scoped to"),
    )
    .arg(
        Arg::new("key")
            .long("key")
            .value_name("KEY")
            .requires("operation")
            .help("The client's idempotency key"),
    )
    .arg(
        Arg::new("key-hash")
            .long("key-hash")
            .value_name("HEX")
            .conflicts_with_all(["scope", "operation", "key"])
            .help("The record's key_hash (64 hex digits, as in idem's logs)"),
    )
}

/// The record as `inspect` showed it: its operation id (which a record purged and claimed
/// afresh does not keep) and its fence (which a takeover moves on).
fn identity_args(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("operation-id")
            .long("operation-id")
            .value_name("ID")
            .required(true)
            .help(
                "The operation id `inspect` showed: the record is changed only if it is still \
                 that operation",
            ),
    )
    .arg(
        Arg::new("fence")
            .long("fence")
            .value_name("N")
            .required(true)
            .value_parser(clap::value_parser!(i64))
            .help("The fence `inspect` showed: the record is changed only if it still has it"),
    )
}
