//! The Lua scripts of [`RedisStore`](super::RedisStore): their text, in `scripts/*.lua`, and the
//! [`Script`]s (text and SHA1 digest) the store calls with `EVALSHA`.
//!
//! A script is its parts in order, each after a line break: `prelude.lua` (the clock, integers
//! as decimal strings, the record's fields) and `owned.lua` (`ours`: the record has the lease's
//! fence `ARGV[1]` and operation id `ARGV[2]`; `owned`: ours and processing) first where the
//! script uses them, then its own part. The `KEYS`, `ARGV` and answers of each script
//! are documented here, beside its text.
//!
//! The rule: a script reads, decides on and writes its record within the one call, by the
//! server's `TIME` or the test clock passed as an argument, never across two commands.

use std::sync::LazyLock;

use redis::Script;

/// The claim (S13, S21, S23). `KEYS`: record, index, index of remembered responses (none on a cluster). `ARGV`: readable key,
/// request hash, a new operation id, now (`''`: the server's), lease ms, TTL ms, expiry margin
/// ms, key hash (the index member), remember ms (0: none). Answers `{1, fence, operation id, lease_until, expire_at,
/// took_over, now}` (acquired), `{2, holder's request hash, retry after ms}` (in progress),
/// `{3, now, record..}` (completed) or `{0, detail}` (a record that does not decode).
pub(super) const CLAIM_LUA: &str = concat!(
    "\n",
    include_str!("scripts/prelude.lua"),
    "\n",
    include_str!("scripts/claim.lua"),
);

/// Completion (S18). `KEYS`: record, index, index of remembered responses (none on a cluster). `ARGV`: fence, operation id,
/// state, status, headers, body, `'1'` with a business number, the business number, expire_at
/// (`''`: keep), now, margin, key hash. Answers 2 (stored), 1 (stored earlier under this very
/// lease: a retry after a lost acknowledgement, or after replicas that did not acknowledge in
/// time) or 0 (fenced out).
///
/// The retry rewrites the record's state with its own value: a write of this connection, so
/// that the `WAIT` after it counts the replicas that hold the completion stored earlier.
pub(super) const COMPLETE_LUA: &str = concat!(
    "\n",
    include_str!("scripts/prelude.lua"),
    "\n",
    include_str!("scripts/owned.lua"),
    "\n",
    include_str!("scripts/complete.lua"),
);

/// Release: deletes the processing record the lease owns. `KEYS`: record, indexes (none on a
/// cluster). `ARGV`: fence, operation id, key hash. Answers 1, or 0 (fenced out).
pub(super) const RELEASE_LUA: &str = concat!(
    "\n",
    include_str!("scripts/owned.lua"),
    "\n",
    include_str!("scripts/release.lua"),
);

/// Abandon: ends the lease now, keeps the record. `KEYS`: record. `ARGV`: fence, operation id,
/// now. Answers 1, or 0 (fenced out).
pub(super) const ABANDON_LUA: &str = concat!(
    "\n",
    include_str!("scripts/prelude.lua"),
    "\n",
    include_str!("scripts/owned.lua"),
    "\n",
    include_str!("scripts/abandon.lua"),
);

/// Extend: the lease ends `by` from now, the record lives at least as long. `KEYS`: record,
/// indexes (none on a cluster). `ARGV`: fence, operation id, by ms, now, margin, key hash. Answers
/// `{1, lease_until, expire_at}`, or `{0}` (fenced out).
pub(super) const EXTEND_LUA: &str = concat!(
    "\n",
    include_str!("scripts/prelude.lua"),
    "\n",
    include_str!("scripts/owned.lua"),
    "\n",
    include_str!("scripts/extend.lua"),
);

/// The record and the clock, read together. `KEYS`: record. `ARGV`: now. Answers
/// `{now, record..}`.
pub(super) const GET_LUA: &str = concat!(
    "\n",
    include_str!("scripts/prelude.lua"),
    "\n",
    include_str!("scripts/get.lua"),
);

/// Purge (S21) along the index, oldest expiry first, ties by key hash (the sorted set's own
/// order): deletes up to `batch` records whose `expire_at` has passed, re-checked on the record
/// itself; drops the entries of records Redis already deleted without counting them, looking at
/// no more than ten batches' worth of entries in one call. `KEYS`: index, index of remembered
/// responses. `ARGV`: now, batch, record key prefix. Answers the number of records deleted.
pub(super) const PURGE_LUA: &str = concat!(
    "\n",
    include_str!("scripts/prelude.lua"),
    "\n",
    include_str!("scripts/purge.lua"),
);

/// The purge's first phase for remembered records, along the index of their responses
/// (`<prefix>replay_until`, scored by `replay_until`): frees the headers and body of up to
/// `batch` completed records past their `replay_until` and within their `expire_at`, which
/// turns `replay_until` negative, and drops their entries; drops the entries of records with
/// nothing to free. `KEYS`: index of remembered responses. `ARGV`: now, batch, record key
/// prefix. Answers the number of responses freed.
pub(super) const PURGE_RESPONSES_LUA: &str = concat!(
    "\n",
    include_str!("scripts/prelude.lua"),
    "\n",
    include_str!("scripts/purge_responses.lua"),
);

// The operator scripts: what the `idem` CLI's `rekey` calls, and what other tools may call
// beside the store. They follow the store's record: its state, its expiry by the server's clock,
// and its row version `rev`, which every write of the store increments.

/// A live stored record's fields, or nothing. `KEYS`: the record. Answers `rev`, `idem_key`,
/// `resp_headers`, `resp_body`, `biz_no` (absent: empty), `operation_id`, `request_hash`,
/// `resp_status`, `state` when it is completed or failed-stored and not expired by the server's
/// clock, `{}` otherwise.
pub(super) const READ_STORED_LUA: &str = concat!("\n", include_str!("scripts/read_stored.lua"));

/// The response of a stored record replaced while it is still operation `ARGV[5]` at `rev`
/// `ARGV[1]`: 1, or 0 when the store wrote it since (a record purged and claimed afresh restarts
/// `rev` at 1, under another operation id). `KEYS`: the record. `ARGV`: rev, idem_key, headers,
/// body, operation id, business number (empty: none).
pub(super) const REWRITE_STORED_LUA: &str =
    concat!("\n", include_str!("scripts/rewrite_stored.lua"));

pub(super) static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM_LUA));
pub(super) static COMPLETE: LazyLock<Script> = LazyLock::new(|| Script::new(COMPLETE_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
pub(super) static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(ABANDON_LUA));
pub(super) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
pub(super) static GET: LazyLock<Script> = LazyLock::new(|| Script::new(GET_LUA));
pub(super) static PURGE: LazyLock<Script> = LazyLock::new(|| Script::new(PURGE_LUA));
pub(super) static PURGE_RESPONSES: LazyLock<Script> =
    LazyLock::new(|| Script::new(PURGE_RESPONSES_LUA));
