-- idem: remember a key past its TTL (`remember = ".."`, docs/storage.md, "Remembered keys").
-- A remembered record lives until `expire_at`, the end of its remember window; its response is
-- replayed until `replay_until` (the end of the TTL), and answered `key-expired` after it.
-- `replay_until` is NULL for every other record (replayed until `expire_at`, as before), and
-- negative once the purge freed the response (its absolute value is still when it expired),
-- which takes the row out of the range `(0, now]` the purge reads along the index. Two
-- statements: the NULL column is added in place (MariaDB 10.3+, MySQL 8.0.12+) without copying
-- the table, which it would be if the index came in the same statement; the index is built
-- online.
ALTER TABLE idem_idempotency_records ADD COLUMN replay_until BIGINT NULL;
ALTER TABLE idem_idempotency_records ADD KEY idx_idem_replay_until (replay_until);
