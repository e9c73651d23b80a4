DROP INDEX accounts_live_name_unique;
ALTER TABLE accounts DROP COLUMN demo, DROP COLUMN revoked_at;
