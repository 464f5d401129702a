//! The `idem` CLI (`src/bin/idem/`), run as a process against a fresh database of each SQL
//! backend: migrate, inspect, stats, release, expire (fence-guarded), purge, and its errors.

use std::process::Output;
use std::time::Duration;

use idem::RequestHash;
use idem::key::ScopedKey;
use idem::store::{Claim, ClaimRequest, Completion, Outcome};

use crate::backends::{Database, backend_tests, on_database};

/// Runs `idem --database-url <url> <args>`.
fn idem(url: &str, args: &[&str]) -> Output {
    idem_with(url, args, &[])
}

/// Runs `idem --database-url <url> <args>` with the environment variables `env` set.
pub(crate) fn idem_with(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("IDEM_ENCRYPTION_KEYS")
        .envs(env.iter().copied())
        .output()
        .expect("the idem binary runs")
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `idem <args>` that must succeed; its standard output.
fn ok(url: &str, args: &[&str]) -> String {
    ok_with(url, args, &[])
}

/// [`ok`] with the environment variables `env` set.
pub(crate) fn ok_with(url: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let o = idem_with(url, args, env);
    assert!(
        o.status.success(),
        "idem {args:?} failed: {}{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// `idem <args>` that must fail with one line on standard error; that line.
fn fails(url: &str, args: &[&str]) -> String {
    let o = idem(url, args);
    assert!(
        !o.status.success(),
        "idem {args:?} succeeded: {}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("error: "), "{err:?}");
    err
}

/// The value printed after `label` in `inspect`'s output.
pub(crate) fn field<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` in {out}"))
        .trim()
}

/// Every command against a fresh database, beside the library's view of it (`store`): migrate,
/// inspect, stats, release, expire (fence-guarded), purge.
async fn commands_on_a_fresh_database(db: &Database) {
    let url = db.url.as_str();
    let store = db.store().await;
    let first = ok(url, &["migrate"]);
    assert!(first.contains("applied "), "{first}");
    let second = ok(url, &["migrate"]);
    assert!(second.contains("nothing to apply"), "{second}");
    assert!(!second.contains("applied "), "{second}");

    let key = ScopedKey::new(&["acme", "u1"], "pay", "k-1").unwrap();
    let claim = ClaimRequest::new(
        &key,
        RequestHash::of_bytes(b"the request"),
        Duration::from_secs(600),
        Duration::from_secs(1800),
    );
    let Claim::Acquired(lease) = store.claim(&claim).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    let hash = key.hash_hex().to_string();

    let by_parts = ok(
        url,
        &[
            "inspect",
            "--scope",
            "acme",
            "--scope",
            "u1",
            "--operation",
            "pay",
            "--key",
            "k-1",
        ],
    );
    let by_hash = ok(url, &["inspect", "--key-hash", &hash]);
    assert_eq!(by_parts, by_hash);
    assert_eq!(field(&by_hash, "state"), "processing");
    assert_eq!(field(&by_hash, "key hash"), hash);
    assert_eq!(field(&by_hash, "operation id"), lease.operation_id);
    assert_eq!(
        field(&by_hash, "request hash"),
        RequestHash::of_bytes(b"the request").to_string()
    );
    let fence = field(&by_hash, "fence").to_owned();
    assert_eq!(fence, lease.fence.to_string());
    assert!(
        field(&by_hash, "expire at").contains("Z (in 29m"),
        "{by_hash}"
    );
    // A miss says what the key hash was computed from, and how to pass absent scope parts.
    let missing = fails(url, &["inspect", "--operation", "pay", "--key", "k-1"]);
    assert!(
        missing.contains("computed from operation \"pay\" and 0 scope parts:"),
        "{missing}"
    );
    assert!(missing.contains("--scope \"\" for each part"), "{missing}");
    let one = fails(
        url,
        &[
            "inspect",
            "--scope",
            "acme",
            "--operation",
            "pay",
            "--key",
            "k-1",
        ],
    );
    assert!(one.contains("and 1 scope part [\"acme\"]"), "{one}");

    let stats = ok(url, &["stats"]);
    assert!(
        stats.starts_with("records by state, expired ones included until purged:\n"),
        "{stats}"
    );
    assert!(stats.contains("processing    1"), "{stats}");
    assert!(
        stats.contains(&format!("oldest processing  {hash}")),
        "{stats}"
    );
    assert!(stats.contains("expiring in 1 h    1"), "{stats}");
    assert!(stats.contains("expiring in 1 d    1"), "{stats}");

    let json: serde_json::Value = serde_json::from_str(&ok(url, &["stats", "--json"])).unwrap();
    assert_eq!(json["processing"], 1);
    assert_eq!(json["oldest_processing"]["key_hash"], hash.as_str());
    let text = ok(url, &["inspect", "--key-hash", &hash, "--json"]);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let members = [
        "key",
        "key_hash",
        "state",
        "expired",
        "remembered",
        "fence",
        "operation_id",
        "lease_until",
        "expire_at",
        "replay_until",
        "response_freed",
        "created_at",
        "updated_at",
        "request_hash",
        "status",
        "biz_no",
        "sealed_under",
        "unopened",
        "body_len",
        "body",
    ];
    let at: Vec<usize> = members
        .iter()
        .map(|m| text.find(&format!("\"{m}\":")).unwrap_or(usize::MAX))
        .collect();
    assert!(at.is_sorted() && !at.contains(&usize::MAX), "{text}");
    assert_eq!(json.as_object().unwrap().len(), members.len(), "{text}");
    // A processing record has no response: nothing is said to be sealed or unreadable.
    assert_eq!(json["unopened"], serde_json::Value::Null, "{text}");
    // RFC 3339 in UTC with milliseconds: `2024-01-02T03:04:05.678Z`.
    for time in ["lease_until", "expire_at", "created_at", "updated_at"] {
        let t = json[time].as_str().unwrap();
        assert!(
            t.len() == 24 && &t[19..20] == "." && t.ends_with('Z'),
            "{t}"
        );
    }
    assert_eq!(json["fence"], lease.fence);
    assert_eq!(json["state"], "processing");
    assert_eq!(json["operation_id"], lease.operation_id.as_str());
    assert_eq!(json["body"], serde_json::Value::Null);

    // release ends the lease and keeps the operation id; a retry of the same request takes over.
    let op = lease.operation_id.as_str();
    let as_seen = |fence: &str| -> Vec<String> {
        ["--key-hash", &hash, "--operation-id", op, "--fence", fence]
            .map(str::to_owned)
            .to_vec()
    };
    let with = |action: &str, fence: &str| -> Vec<String> {
        [vec![action.to_owned()], as_seen(fence)].concat()
    };
    ok(url, &args(&with("release", &fence)));
    let Claim::Acquired(retry) = store.claim(&claim).await.unwrap() else {
        panic!("a released lease is taken over");
    };
    assert_eq!(retry.operation_id, lease.operation_id);
    assert_eq!(retry.fence, lease.fence + 1);

    // The operator's fence is now stale.
    let stale = fails(url, &args(&with("expire", &fence)));
    assert!(
        stale.contains(&format!(
            "the record changed since you inspected it (fence now {})",
            retry.fence
        )),
        "{stale}"
    );
    let dry = ok(url, &["purge", "--dry-run"]);
    assert!(dry.contains("0 expired records would be purged"), "{dry}");
    let fence = retry.fence.to_string();
    ok(url, &args(&with("expire", &fence)));
    let expired = ok(url, &["inspect", "--key-hash", &hash]);
    assert!(field(&expired, "state").contains("(expired)"), "{expired}");

    let dry = ok(url, &["purge", "--dry-run"]);
    assert!(dry.contains("1 expired record would be purged"), "{dry}");
    assert!(ok(url, &["inspect", "--key-hash", &hash]).contains("fence"));
    let purged = ok(url, &["purge", "--batch", "10"]);
    assert!(purged.contains("purged 1 expired record\n"), "{purged}");
    fails(url, &["inspect", "--key-hash", &hash]);

    // The key is claimed afresh: fence 1 again, another operation. An operator's command of the
    // record seen before the purge leaves it alone, whatever the fence.
    let Claim::Acquired(fresh) = store.claim(&claim).await.unwrap() else {
        panic!("a purged key is claimed afresh");
    };
    assert_ne!(fresh.operation_id, lease.operation_id);
    let fresh_fence = fresh.fence.to_string();
    for action in ["release", "expire"] {
        let gone = fails(url, &args(&with(action, &fresh_fence)));
        assert!(
            gone.contains(&format!(
                "the record is another operation since you inspected it (operation id now {})",
                fresh.operation_id
            )),
            "{gone}"
        );
    }
    store
        .complete(
            &fresh,
            &Completion::new(Outcome::Completed, 201, b"new".to_vec()),
        )
        .await
        .unwrap();
    assert!(matches!(store.claim(&claim).await.unwrap(), Claim::Completed(r) if r.body == b"new"));
    let stats = ok(url, &["stats"]);
    assert!(stats.contains("processing    0"), "{stats}");
}

/// A record remembered past its TTL (`remember`), as the CLI shows it: `inspect` says so and
/// when its response expired, `stats` counts it, `purge` frees its response and keeps it.
async fn remembered_records(db: &Database) {
    use idem::store::{Clock, ManualClock, SystemClock};
    let url = db.url.as_str();
    ok(url, &["migrate"]);
    // Claimed two hours ago with a TTL of one hour, remembered for ten.
    let two_hours_ago = SystemClock.now() - Duration::from_secs(7200);
    let clock = std::sync::Arc::new(ManualClock::new(two_hours_ago));
    let past = db.store_with_clock(clock).await;
    let key = ScopedKey::new(&["acme"], "pay", "k-remembered").unwrap();
    let hash = RequestHash::of_bytes(b"the request");
    let claim = ClaimRequest::new(
        &key,
        hash,
        Duration::from_secs(10),
        Duration::from_secs(3600),
    )
    .remembering(Duration::from_secs(36_000));
    let Claim::Acquired(lease) = past.claim(&claim).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    let done = Completion::new(Outcome::Completed, 201, b"{}".to_vec()).with_biz_no("pay_9");
    past.complete(&lease, &done).await.unwrap();

    let key_hash = key.hash_hex().to_string();
    let shown = ok(url, &["inspect", "--key-hash", &key_hash]);
    assert!(
        field(&shown, "state").starts_with("completed (remembered"),
        "{shown}"
    );
    assert!(
        field(&shown, "replay until").contains("Z (1h 0m 0s ago"),
        "{shown}"
    );
    assert!(
        field(&shown, "remember until").contains("Z (in 7h 59m"),
        "{shown}"
    );
    let json = ok(url, &["inspect", "--key-hash", &key_hash, "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["remembered"], true);
    assert_eq!(json["response_freed"], false);
    let stats = ok(url, &["stats"]);
    assert!(stats.contains("remembered    1"), "{stats}");

    let purged = ok(url, &["purge"]);
    assert!(purged.contains("freed 1 remembered response"), "{purged}");
    assert!(purged.contains("freed 1 (total 1)\n"), "progress: {purged}");
    let shown = ok(url, &["inspect", "--key-hash", &key_hash]);
    assert!(
        field(&shown, "replay until").ends_with("(response freed by the purge)"),
        "{shown}"
    );
    // The record still answers for its operation, by the database's clock.
    let now = db.store().await;
    match now.claim(&claim).await.unwrap() {
        Claim::Remembered(r) => {
            assert_eq!(r.biz_no.as_deref(), Some("pay_9"));
            assert_eq!(r.operation_id, lease.operation_id);
            assert!(r.body.is_empty());
        }
        other => panic!("expected Remembered, got {other:?}"),
    }
    // Switching encryption on: `rekey` seals what is left of it, its business number, into a
    // receipt; the response columns stay empty; `inspect` opens it with the key ring.
    let keys = [(
        "IDEM_ENCRYPTION_KEYS",
        "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
    )];
    let rekeyed = ok_with(url, &["rekey", "--accept-plaintext"], &keys);
    assert!(rekeyed.contains("resealed 1 of 1"), "{rekeyed}");
    match now.claim(&claim).await.unwrap() {
        Claim::Remembered(r) => {
            let receipt = r.biz_no.unwrap_or_default();
            assert!(receipt.starts_with(idem::seal::RECEIPT), "{receipt}");
            assert!(r.body.is_empty() && r.headers.is_empty());
        }
        other => panic!("expected Remembered, got {other:?}"),
    }
    let shown = ok_with(url, &["inspect", "--key-hash", &key_hash], &keys);
    assert_eq!(field(&shown, "business no"), "pay_9", "{shown}");
    assert_eq!(field(&shown, "sealed under"), "key `k1`", "{shown}");
    let again = ok_with(url, &["rekey", "--dry-run"], &keys);
    assert!(again.contains("would reseal 0 of "), "{again}");
}

backend_tests!(
    2,
    on_database,
    [sqlite, postgres, mysql],
    commands_on_a_fresh_database,
    remembered_records,
);

#[test]
fn cli_errors_are_one_line() {
    // At once, with the cause: not a pool timeout after 5 s, nor "retry after 1s".
    let started = std::time::Instant::now();
    let unreachable = fails("postgres://idem:secret@127.0.0.1:1/idem", &["stats"]);
    assert_eq!(
        unreachable,
        "error: cannot reach the database at postgres://idem:***@127.0.0.1:1/idem: connection \
         refused (is the server running? check --database-url or DATABASE_URL)\n"
    );
    assert!(started.elapsed() < Duration::from_secs(4), "{unreachable}");
    let unknown = fails("oracle://x:secret@host/db", &["stats"]);
    assert!(unknown.contains("unsupported database URL"), "{unknown}");
    assert!(!unknown.contains("secret"), "{unknown}");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("absent.db").display());
    for command in [
        &["inspect", "--key-hash", &"ab".repeat(32)][..],
        &["stats"],
        &["purge"],
    ] {
        let unmigrated = fails(&url, command);
        assert!(
            unmigrated.contains("idem_idempotency_records"),
            "{unmigrated}"
        );
        assert!(
            unmigrated.contains("run `idem migrate` first"),
            "{unmigrated}"
        );
        assert_eq!(
            unmigrated.matches("no such table").count(),
            1,
            "{unmigrated}"
        );
    }
    let bad_hash = fails(&url, &["inspect", "--key-hash", "xyz"]);
    assert!(bad_hash.contains("64 hex digits"), "{bad_hash}");
}

/// `args` as the `&[&str]` that `ok` and `fails` take.
fn args(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A SQLite database as the payments example takes it: a bare path (after the command, or in
/// `--database-url`) or one of sqlx's URLs, whose `?mode=rwc` is a parameter, not part of the
/// file's name.
#[test]
fn sqlite_paths_and_urls_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payments.db");
    let path = file.display().to_string();
    let with_params = format!("sqlite://{path}?mode=rwc");
    ok(&with_params, &["migrate"]);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.contains(&"payments.db".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n.contains('?')), "{names:?}");
    for url in [path.as_str(), &format!("sqlite:{path}"), &with_params] {
        ok(url, &["stats"]);
    }
    // The path after the command, without --database-url.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["stats", &path])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("processing"), "{}", stdout(&o));
}

/// A usage error is one line with exit code 1, as `docs/operations.md` says, with clap's
/// did-you-mean tip and where the usage is; `--json` is an option of `inspect` and `stats` only.
#[test]
fn usage_errors_are_one_line_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("idem.db").display().to_string();
    let typo = fails(&url, &["stat"]);
    assert_eq!(
        typo,
        "error: unrecognized subcommand 'stat'; a similar subcommand exists: 'stats' (see \
         `idem --help`)\n"
    );
    assert_eq!(idem(&url, &["stat"]).status.code(), Some(1));
    let flag = fails(&url, &["purge", "--dry-rn"]);
    assert!(
        flag.starts_with("error: unexpected argument '--dry-rn'"),
        "{flag}"
    );
    assert!(flag.contains("'--dry-run'"), "{flag}");
    assert!(flag.ends_with("(see `idem purge --help`)\n"), "{flag}");
    let json = fails(&url, &["migrate", "--json"]);
    assert!(json.contains("'--json'"), "{json}");
    for command in ["migrate", "purge", "rekey", "release", "expire"] {
        let help = ok(&url, &[command, "--help"]);
        assert!(!help.contains("--json"), "{command}: {help}");
    }
    for command in ["inspect", "stats"] {
        assert!(
            ok(&url, &[command, "--help"]).contains("--json"),
            "{command}"
        );
    }
    // `--keys-file` where responses are opened, `--redis-prefix` where Redis is served.
    for (option, on) in [
        ("--keys-file", ["inspect", "rekey"].as_slice()),
        ("--redis-prefix", ["migrate", "purge", "rekey"].as_slice()),
    ] {
        for command in [
            "migrate", "purge", "inspect", "rekey", "stats", "release", "expire",
        ] {
            let help = ok(&url, &[command, "--help"]);
            assert_eq!(
                help.contains(option),
                on.contains(&command),
                "{command}: {help}"
            );
        }
    }
    let keys = fails(&url, &["stats", "--keys-file", "keys.txt"]);
    assert!(
        keys.starts_with("error: unexpected argument '--keys-file'"),
        "{keys}"
    );
}
