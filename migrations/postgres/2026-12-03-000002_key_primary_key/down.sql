DROP INDEX idempotency_keys_expires_at_brin;
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_account_key_unique UNIQUE (account_id, key),
    ADD COLUMN id BIGSERIAL PRIMARY KEY;
