-- See migrations/postgres/2026-12-04-000002_card_network.
ALTER TABLE charges ADD COLUMN authorization_id TEXT;
ALTER TABLE idempotency_keys ADD COLUMN request_path TEXT;
ALTER TABLE idempotency_keys ADD COLUMN request_body TEXT;

CREATE TABLE authorizations (
    id          TEXT PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts (id),
    amount      INTEGER NOT NULL CHECK (amount > 0),
    currency    TEXT NOT NULL CHECK (length(currency) = 3 AND currency = lower(currency)),
    created_at  TEXT NOT NULL
);

CREATE INDEX authorizations_account_created_idx ON authorizations (account_id, created_at DESC, id DESC);
