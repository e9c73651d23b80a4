-- Accounts for real use (`charges account create|revoke`): a revoked account's
-- key stops working; its charges stay. The seeded demo account is flagged so
-- that its public key authenticates only on a server in demo mode.
ALTER TABLE accounts
    ADD COLUMN revoked_at TIMESTAMPTZ,
    ADD COLUMN demo BOOLEAN NOT NULL DEFAULT false;

-- The demo account seeded before this migration: SHA-256 of sk_test_demo.
UPDATE accounts SET demo = true
 WHERE api_key_sha256 = '5d48f1024f38b44ad9ddc03dc12b2a8287c7ec690065dcef384cb1fd1753626d';

-- `account revoke <name>` names one live account.
CREATE UNIQUE INDEX accounts_live_name_unique ON accounts (name) WHERE revoked_at IS NULL;
