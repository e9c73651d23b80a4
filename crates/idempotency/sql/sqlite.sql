-- The key table, SQLite: UUIDs, JSON and times are TEXT (times as RFC 3339
-- in UTC with microseconds, which sort as they compare). Add your own
-- foreign key from account_id to your accounts table.
CREATE TABLE idempotency_keys (
    account_id       INTEGER NOT NULL,
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'in_progress'
                     CHECK (status IN ('in_progress', 'completed')),
    response_status  INTEGER,
    response_headers TEXT,
    response_body    TEXT,
    created_at       TEXT NOT NULL,
    expires_at       TEXT NOT NULL,
    locked_until     TEXT NOT NULL,
    lease_token      TEXT NOT NULL,
    request_path     TEXT,
    request_body     TEXT,
    foreign_step     TEXT,
    PRIMARY KEY (account_id, key),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        status <> 'completed'
        OR (response_status IS NOT NULL AND response_headers IS NOT NULL AND response_body IS NOT NULL)
    )
);

CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
