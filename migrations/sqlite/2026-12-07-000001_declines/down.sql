DROP INDEX charges_account_status_created_idx;
ALTER TABLE charges DROP COLUMN failure_code;
ALTER TABLE charges DROP COLUMN status;
ALTER TABLE charges DROP COLUMN payment_method;
