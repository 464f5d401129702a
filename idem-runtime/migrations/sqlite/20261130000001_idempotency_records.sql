-- idem: the idempotency record (docs/storage.md). Table prefixed `idem_`; the migration history is
-- `idem_sqlx_migrations`, never the application's own `_sqlx_migrations`.
-- Times are INTEGER milliseconds since the Unix epoch, computed by the application's clock.
CREATE TABLE idem_idempotency_records (
    key_hash      BLOB    NOT NULL,   -- SHA-256 of the length-prefixed scoped key
    idem_key      TEXT    NOT NULL,   -- readable tenant:user:operation:client_key
    request_hash  TEXT    NOT NULL,   -- hex SHA-256 of the canonical request (S3, S4)
    state         INTEGER NOT NULL,   -- 0 processing, 1 completed, 2 failed-but-stored
    operation_id  TEXT    NOT NULL,   -- stable across lease takeovers (S22, S23)
    fence         INTEGER NOT NULL,   -- fencing token, +1 on every claim (S23)
    rev           INTEGER NOT NULL,   -- row version, +1 on every write
    resp_status   INTEGER,
    resp_headers  BLOB,               -- whitelisted headers, length-prefixed blob
    resp_body     BLOB,
    biz_no        TEXT,               -- business number (S11)
    locked_at     INTEGER NOT NULL,
    lease_until   INTEGER NOT NULL,
    expire_at     INTEGER NOT NULL,   -- logically absent from then on (S19-S21)
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    completed_at  INTEGER,
    -- S4/S17: the claim index; every column of it NOT NULL.
    CONSTRAINT uk_idem_key PRIMARY KEY (key_hash),
    CONSTRAINT ck_idem_key_hash CHECK (length(key_hash) = 32),
    CONSTRAINT ck_idem_request_hash CHECK (length(request_hash) = 64),
    CONSTRAINT ck_idem_state CHECK (state IN (0, 1, 2))
);

-- purge_expired deletes in batches along this index (no full scans).
CREATE INDEX idx_idem_expire_at ON idem_idempotency_records (expire_at);
