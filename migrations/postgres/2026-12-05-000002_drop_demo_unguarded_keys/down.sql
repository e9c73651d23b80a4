-- As 2026-12-01-000004 made it.
CREATE TABLE IF NOT EXISTS demo_unguarded_keys (
    id            BIGSERIAL PRIMARY KEY,
    account_id    BIGINT NOT NULL REFERENCES accounts (id),
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    charge_id     UUID NOT NULL REFERENCES charges (id),
    response_body JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS demo_unguarded_keys_account_key_idx ON demo_unguarded_keys (account_id, key);
