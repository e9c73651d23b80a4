DROP INDEX accounts_live_name_unique;
ALTER TABLE accounts DROP COLUMN demo;
ALTER TABLE accounts DROP COLUMN revoked_at;
