-- The key table, PostgreSQL. One row per (account, key): registering a key
-- is `INSERT … ON CONFLICT (account_id, key) DO NOTHING` on this primary
-- key, and a concurrent duplicate waits on its index entry. Add your own
-- foreign key from account_id to your accounts table.
CREATE TABLE idempotency_keys (
    account_id       BIGINT NOT NULL,
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    -- What identifies the request (method, path, body): the same key with
    -- another fingerprint is a 422.
    fingerprint      TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'in_progress'
                     CHECK (status IN ('in_progress', 'completed')),
    -- The response to replay, byte for byte.
    response_status  SMALLINT,
    response_headers JSONB,
    response_body    JSONB,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at       TIMESTAMPTZ NOT NULL,
    -- An in-progress row's lease: others may take it over once it is past.
    locked_until     TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_token      UUID NOT NULL DEFAULT gen_random_uuid(),
    -- An in-progress row keeps its request, so that recovery can finish it,
    -- and the foreign step it calls, so that only a worker that calls the
    -- same one does.
    request_path     TEXT,
    request_body     JSONB,
    foreign_step     TEXT,
    PRIMARY KEY (account_id, key),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        status <> 'completed'
        OR (response_status IS NOT NULL AND response_headers IS NOT NULL AND response_body IS NOT NULL)
    )
);

-- The purge finds expired rows without sorting them.
CREATE INDEX idempotency_keys_expires_at_brin ON idempotency_keys USING brin (expires_at);
