-- See migrations/postgres/2026-12-04-000001_refunds. SQLite cannot drop a
-- column that has a foreign key, so the key table is rebuilt without
-- charge_id.
CREATE TABLE idempotency_keys_new (
    account_id       INTEGER NOT NULL REFERENCES accounts (id),
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
    PRIMARY KEY (account_id, key),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        status <> 'completed'
        OR (response_status IS NOT NULL AND response_headers IS NOT NULL AND response_body IS NOT NULL)
    )
);

INSERT INTO idempotency_keys_new
    (account_id, key, fingerprint, status, response_status, response_headers, response_body,
     created_at, expires_at, locked_until, lease_token)
SELECT account_id, key, fingerprint, status, response_status, response_headers, response_body,
       created_at, expires_at, locked_until, lease_token
FROM idempotency_keys;

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

ALTER TABLE charges ADD COLUMN amount_refunded INTEGER NOT NULL DEFAULT 0
    CHECK (amount_refunded >= 0 AND amount_refunded <= amount);

CREATE TABLE refunds (
    id          TEXT PRIMARY KEY,
    charge_id   TEXT NOT NULL REFERENCES charges (id),
    account_id  INTEGER NOT NULL REFERENCES accounts (id),
    amount      INTEGER NOT NULL CHECK (amount > 0),
    currency    TEXT NOT NULL CHECK (length(currency) = 3 AND currency = lower(currency)),
    created_at  TEXT NOT NULL
);

CREATE INDEX refunds_charge_created_idx ON refunds (charge_id, created_at DESC, id DESC);
