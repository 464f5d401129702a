-- idem: the two CHECK constraints go. PostgreSQL prepares a table's CHECK expressions again for
-- every statement that writes a row: each cost every claim, takeover and completion about 2 µs
-- of server time, together a fifth of a fresh claim's (BENCHMARKS.md, "Against the minimal
-- correct layer"). They guarded nothing idem's own writes can get wrong: the key hash is always
-- a SHA-256 (32 bytes), the state always 0, 1 or 2. A row another writer leaves in another state
-- is refused as corrupt when read (`unknown state`, answered 503) and fences out the lease it was
-- taken from: it never replays, and nothing runs under it.
-- The ALTER takes the table's strongest lock, for an instant; queued behind a long transaction on
-- the table it would hold every claim behind it, so it gives up after 5 s instead: `migrate()`
-- reports the error, and running it again later applies it.
SET LOCAL lock_timeout = '5s';
ALTER TABLE idem.idempotency_records
    DROP CONSTRAINT IF EXISTS ck_idem_key_hash,
    DROP CONSTRAINT IF EXISTS ck_idem_state;
