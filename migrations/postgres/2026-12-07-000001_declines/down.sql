DROP INDEX charges_account_status_created_idx;
ALTER TABLE charges
    DROP CONSTRAINT charges_failed_never_refunded,
    DROP CONSTRAINT charges_failure_code_when_failed,
    DROP COLUMN failure_code,
    DROP COLUMN status,
    DROP COLUMN payment_method;
