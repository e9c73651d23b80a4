ALTER TABLE authorizations DROP COLUMN voided_at;
