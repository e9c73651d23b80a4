-- The same schema as migrations/postgres, in SQLite's types: UUIDs, JSON and
-- timestamps are TEXT. Timestamps are always written by the app as
-- RFC 3339 UTC with microseconds ("2026-12-02T14:47:33.173074Z"), a fixed
-- width, so comparing the text compares the times.
CREATE TABLE accounts (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT NOT NULL,
    api_key_sha256 TEXT NOT NULL UNIQUE CHECK (length(api_key_sha256) = 64),
    created_at     TEXT NOT NULL
);

CREATE TABLE charges (
    id          TEXT PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts (id),
    amount      INTEGER NOT NULL CHECK (amount > 0),
    currency    TEXT NOT NULL CHECK (length(currency) = 3 AND currency = lower(currency)),
    description TEXT,
    created_at  TEXT NOT NULL
);

CREATE INDEX charges_account_created_idx ON charges (account_id, created_at DESC, id DESC);

CREATE TABLE idempotency_keys (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
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
    CONSTRAINT idempotency_keys_account_key_unique UNIQUE (account_id, key),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        status <> 'completed'
        OR (response_status IS NOT NULL AND response_headers IS NOT NULL AND response_body IS NOT NULL)
    )
);

CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

-- Demo only, as in migrations/postgres: no unique constraint on purpose.
CREATE TABLE demo_unguarded_keys (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id    INTEGER NOT NULL REFERENCES accounts (id),
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    charge_id     TEXT NOT NULL REFERENCES charges (id),
    response_body TEXT NOT NULL,
    created_at    TEXT NOT NULL
);

CREATE INDEX demo_unguarded_keys_account_key_idx ON demo_unguarded_keys (account_id, key);
