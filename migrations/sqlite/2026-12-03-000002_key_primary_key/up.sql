-- See migrations/postgres/2026-12-03-000002_key_primary_key: (account_id, key)
-- is the primary key, without a surrogate id. SQLite cannot change a table's
-- key in place, so the table is rebuilt. (SQLite has no BRIN: the purge keeps
-- its B-tree on expires_at.)
CREATE TABLE idempotency_keys_new (
    account_id       INTEGER NOT NULL REFERENCES accounts (id),
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'in_progress'
                     CHECK (status IN ('in_progress', 'completed')),
    response_status  INTEGER,
    response_headers TEXT,
    response_body    TEXT,
    charge_id        TEXT REFERENCES charges (id),
    created_at       TEXT NOT NULL,
    expires_at       TEXT NOT NULL,
    locked_until     TEXT NOT NULL,
    lease_token      TEXT NOT NULL,
    PRIMARY KEY (account_id, key),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        status <> 'completed'
        OR (response_status IS NOT NULL AND response_headers IS NOT NULL AND response_body IS NOT NULL)
    )
);

INSERT INTO idempotency_keys_new
    (account_id, key, fingerprint, status, response_status, response_headers, response_body,
     charge_id, created_at, expires_at, locked_until, lease_token)
SELECT account_id, key, fingerprint, status, response_status, response_headers, response_body,
       charge_id, created_at, expires_at, locked_until, lease_token
FROM idempotency_keys;

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
