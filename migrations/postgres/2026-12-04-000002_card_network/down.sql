DROP TABLE authorizations;
ALTER TABLE idempotency_keys DROP COLUMN request_path, DROP COLUMN request_body;
ALTER TABLE charges DROP COLUMN authorization_id;
