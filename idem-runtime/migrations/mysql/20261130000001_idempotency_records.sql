-- idem: the idempotency record (docs/storage.md). Table prefixed `idem_`; the migration history is
-- `idem_sqlx_migrations`, never the application's own `_sqlx_migrations`.
-- Times are BIGINT milliseconds since the Unix epoch, computed by the application's clock.
-- The claim index is the primary key on key_hash (MySQL names every primary key `PRIMARY`; it is
-- the clustered index, and tables without a primary key are refused by sql_require_primary_key).
CREATE TABLE idem_idempotency_records (
    key_hash      BINARY(32)                   NOT NULL,  -- SHA-256 of the length-prefixed scoped key
    idem_key      TEXT                         NOT NULL,  -- readable tenant:user:operation:client_key
    request_hash  CHAR(64) CHARACTER SET ascii NOT NULL,  -- hex SHA-256 of the canonical request (S3, S4)
    state         TINYINT                      NOT NULL,  -- 0 processing, 1 completed, 2 failed-but-stored
    operation_id  VARCHAR(64) CHARACTER SET ascii NOT NULL, -- stable across lease takeovers (S22, S23)
    fence         BIGINT                       NOT NULL,  -- fencing token, +1 on every claim (S23)
    rev           BIGINT                       NOT NULL,  -- row version, +1 on every write (S16: always changes)
    resp_status   SMALLINT                     NULL,
    resp_headers  MEDIUMBLOB                   NULL,      -- whitelisted headers, length-prefixed blob
    resp_body     LONGBLOB                     NULL,
    biz_no        TEXT                         NULL,      -- business number (S11)
    locked_at     BIGINT                       NOT NULL,
    lease_until   BIGINT                       NOT NULL,
    expire_at     BIGINT                       NOT NULL,  -- logically absent from then on (S19-S21)
    created_at    BIGINT                       NOT NULL,
    updated_at    BIGINT                       NOT NULL,
    completed_at  BIGINT                       NULL,
    PRIMARY KEY (key_hash),                               -- S4/S17: NOT NULL claim index
    KEY idx_idem_expire_at (expire_at)                    -- purge in batches along this index
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
