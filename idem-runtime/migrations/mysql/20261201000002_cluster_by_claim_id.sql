-- idem: cluster the records on a narrow claim id (docs/storage.md, "The record").
-- `claim_id` is `UUID_SHORT()`, which the server computes for every new row: 8 bytes, unique on
-- the server by construction (server id, start-up time, a counter) and increasing, so new records
-- still go to the table's right edge and the purge still empties its left edge. Every secondary
-- index entry carries the primary key: on `(created_at, operation_id)` (20261201000001) that was
-- 8 + 37 bytes, which nearly doubled the claim index `uk_idem_key` (about 125 B per record) and
-- made claims slow down from a million records on; with `claim_id` its entries carry 8 bytes.
-- Each claim has its own id, so concurrent claims of one key collide only in `uk_idem_key` (no
-- deadlocks, as on the operation id). Not `AUTO_INCREMENT`: an `INSERT` that generates an id
-- reports it where the store reads the statement's "now" (`LAST_INSERT_ID(now)`). No statement
-- of the store names the column: the default fills it, and builds from before this migration run
-- unchanged against the new table.
-- The table is copied (MariaDB and MySQL compute a per-row default only while copying): writes
-- wait for the copy, about 27 s per million records on the test machine. Existing rows get their
-- ids in the order of the old primary key, creation order. A large table can be converted online
-- with pt-online-schema-change or gh-ost before the store migrates (`docs/storage.md`).
-- Needs MySQL 8.0.13 (expression defaults); MariaDB 10.6 has them.
ALTER TABLE idem_idempotency_records
    ADD COLUMN claim_id BIGINT UNSIGNED NOT NULL DEFAULT (UUID_SHORT()),
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (claim_id);
