-- See migrations/postgres/2026-12-03-000001_account_revocation.
ALTER TABLE accounts ADD COLUMN revoked_at TEXT;
ALTER TABLE accounts ADD COLUMN demo INTEGER NOT NULL DEFAULT 0 CHECK (demo IN (0, 1));

UPDATE accounts SET demo = 1
 WHERE api_key_sha256 = '5d48f1024f38b44ad9ddc03dc12b2a8287c7ec690065dcef384cb1fd1753626d';

CREATE UNIQUE INDEX accounts_live_name_unique ON accounts (name) WHERE revoked_at IS NULL;
