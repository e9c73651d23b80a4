-- Measured in bench/ (see bench/README.md): one row per (account, key) needs
-- no surrogate id. (account_id, key) becomes the primary key, the index a
-- concurrent duplicate waits on, and every insert maintains one B-tree fewer.
-- The purge finds expired rows through a BRIN index: expires_at grows with
-- insertion order, so a few block ranges cover it, at almost no cost per insert.
ALTER TABLE idempotency_keys
    DROP COLUMN id,
    DROP CONSTRAINT idempotency_keys_account_key_unique,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (account_id, key);

DROP INDEX idempotency_keys_expires_at_idx;
CREATE INDEX idempotency_keys_expires_at_brin ON idempotency_keys USING brin (expires_at);
