-- As 2026-12-01-000001_create_schema made it.
CREATE TABLE IF NOT EXISTS demo_unguarded_keys (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id    INTEGER NOT NULL REFERENCES accounts (id),
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    charge_id     TEXT NOT NULL REFERENCES charges (id),
    response_body TEXT NOT NULL,
    created_at    TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS demo_unguarded_keys_account_key_idx ON demo_unguarded_keys (account_id, key);
