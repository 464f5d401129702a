-- idem: remember a key past its TTL (`remember = ".."`, docs/storage.md, "Remembered keys").
-- A remembered record lives until `expire_at`, the end of its remember window; its response is
-- replayed until `replay_until` (the end of the TTL), and answered `key-expired` after it.
-- `replay_until` is NULL for every other record (replayed until `expire_at`, as before), and
-- negative once the purge freed the response (its absolute value is still when it expired),
-- which takes the row out of the purge's index. The index holds remembered records only.
ALTER TABLE idem_idempotency_records ADD COLUMN replay_until INTEGER;
CREATE INDEX idx_idem_replay_until ON idem_idempotency_records (replay_until) WHERE replay_until > 0;
