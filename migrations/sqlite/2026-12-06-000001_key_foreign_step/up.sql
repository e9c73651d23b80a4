-- See migrations/postgres/2026-12-06-000001_key_foreign_step.
ALTER TABLE idempotency_keys ADD COLUMN foreign_step TEXT;

CREATE TABLE in_process_network_keys (
    name    TEXT PRIMARY KEY,
    api_key TEXT NOT NULL
);
