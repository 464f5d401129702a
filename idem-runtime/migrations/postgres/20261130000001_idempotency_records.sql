-- idem: the idempotency record (docs/storage.md). Lives in schema `idem`; the migration history is
-- `idem._sqlx_migrations`, never the application's own `_sqlx_migrations`.
-- Times are BIGINT milliseconds since the Unix epoch, computed by the database's clock.
-- The schema is created here too, so that this file stands alone (`psql -f`, other tools); idem
-- 0.1.0 shipped this file without that line, and its checksum is still accepted (postgres.rs).
CREATE SCHEMA IF NOT EXISTS idem;

CREATE TABLE idem.idempotency_records (
    key_hash      BYTEA       NOT NULL,            -- SHA-256 of the length-prefixed scoped key
    idem_key      TEXT        NOT NULL,            -- readable tenant:user:operation:client_key
    request_hash  CHAR(64)    NOT NULL,            -- hex SHA-256 of the canonical request (S3, S4)
    state         SMALLINT    NOT NULL,            -- 0 processing, 1 completed, 2 failed-but-stored
    operation_id  VARCHAR(64) NOT NULL,            -- stable across lease takeovers (S22, S23)
    fence         BIGINT      NOT NULL,            -- fencing token, +1 on every claim (S23)
    rev           BIGINT      NOT NULL,            -- row version, +1 on every write
    resp_status   SMALLINT,
    resp_headers  BYTEA,                           -- whitelisted headers, length-prefixed blob
    resp_body     BYTEA,
    biz_no        TEXT,                            -- business number (S11)
    locked_at     BIGINT      NOT NULL,            -- when the current lease was taken
    lease_until   BIGINT      NOT NULL,
    expire_at     BIGINT      NOT NULL,            -- logically absent from then on (S19-S21)
    created_at    BIGINT      NOT NULL,
    updated_at    BIGINT      NOT NULL,
    completed_at  BIGINT,
    -- S4/S17: the claim index; every column of it NOT NULL.
    CONSTRAINT uk_idem_key PRIMARY KEY (key_hash),
    CONSTRAINT ck_idem_key_hash CHECK (octet_length(key_hash) = 32),
    CONSTRAINT ck_idem_state CHECK (state IN (0, 1, 2))
);

-- purge_expired deletes in batches along this index (no full scans).
CREATE INDEX idx_idem_expire_at ON idem.idempotency_records (expire_at);
