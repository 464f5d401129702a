-- idem: cluster the records in creation order (docs/storage.md, "The record").
-- The primary key is InnoDB's clustered index, the table itself. On the SHA-256 `key_hash` every
-- new record went to a random page of the whole table; on `(created_at, operation_id)`, where
-- `created_at` is the database's "now" of the claim, it goes to the table's right edge, and the
-- purge (in `expire_at` order) empties its left edge. The claim index becomes the unique
-- secondary index `uk_idem_key` on `key_hash`. Not `(created_at, key_hash)`: concurrent claims of
-- one key in the same millisecond then collided on the primary key too, and the losers, queued
-- on a row that its own claim rolled back, deadlocked (about 5 % of a 1,000-request single-key
-- storm, each retried); the operation id is unique to each claim. No AUTO_INCREMENT column: the store hands each
-- statement's "now" back through LAST_INSERT_ID(now), which an INSERT that generates an id
-- would report instead.
-- One statement: the table is never without a unique index on key_hash. It rebuilds the table
-- (online on MariaDB 10.6+ and MySQL 8: writes go on meanwhile, checked against the old primary
-- key).
ALTER TABLE idem_idempotency_records
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (created_at, operation_id),
    ADD UNIQUE KEY uk_idem_key (key_hash);
