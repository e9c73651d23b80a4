-- The card network (issue #22). In the API's database: the authorization a
-- charge holds (the network's id; no foreign key, the network keeps its own
-- database), and, in a key row still in progress, the request it was for, so
-- that a recovery task can finish it after its worker died.
ALTER TABLE charges ADD COLUMN authorization_id UUID;
ALTER TABLE idempotency_keys
    ADD COLUMN request_path TEXT,
    ADD COLUMN request_body JSONB;

-- In the network's own database (the same migrations, another database): the
-- amounts it authorized, per merchant (an account of the network's).
CREATE TABLE authorizations (
    id          UUID PRIMARY KEY,
    account_id  BIGINT NOT NULL REFERENCES accounts (id),
    amount      BIGINT NOT NULL CHECK (amount > 0),
    currency    TEXT NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE INDEX authorizations_account_created_idx ON authorizations (account_id, created_at DESC, id DESC);
