-- Demo only: the "check, then insert" algorithm that the teaching page shows
-- failing. Deliberately no UNIQUE constraint on (account_id, key), so two
-- concurrent requests that both found no row both insert one. The real
-- protocol never reads or writes this table.
CREATE TABLE demo_unguarded_keys (
    id            BIGSERIAL PRIMARY KEY,
    account_id    BIGINT NOT NULL REFERENCES accounts (id),
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    charge_id     UUID NOT NULL REFERENCES charges (id),
    response_body JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX demo_unguarded_keys_account_key_idx ON demo_unguarded_keys (account_id, key);
