-- See migrations/postgres/2026-12-05-000001_authorization_voids.
ALTER TABLE authorizations ADD COLUMN voided_at TEXT;
