-- One row per (account, Idempotency-Key). The UNIQUE constraint is what makes
-- a concurrent duplicate wait for the first request's transaction.
CREATE TABLE idempotency_keys (
    id               BIGSERIAL PRIMARY KEY,
    account_id       BIGINT NOT NULL REFERENCES accounts (id),
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint      TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'in_progress'
                     CHECK (status IN ('in_progress', 'completed')),
    response_status  SMALLINT,
    response_headers JSONB,
    response_body    JSONB,
    charge_id        UUID REFERENCES charges (id),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at       TIMESTAMPTZ NOT NULL,
    CONSTRAINT idempotency_keys_account_key_unique UNIQUE (account_id, key),
    -- A completed key always carries the response it replays.
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        status <> 'completed'
        OR (response_status IS NOT NULL AND response_headers IS NOT NULL AND response_body IS NOT NULL)
    )
);

-- The purge walks expired rows in batches.
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
