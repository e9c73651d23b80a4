-- See migrations/postgres/2026-12-07-000001_declines. SQLite adds no table
-- constraint to an existing table, so the checks are the columns' own.
ALTER TABLE charges ADD COLUMN payment_method TEXT NOT NULL DEFAULT 'pm_card_visa'
    CHECK (payment_method GLOB 'pm_card_[A-Za-z]*' AND payment_method NOT GLOB '*[^A-Za-z_]*');
ALTER TABLE charges ADD COLUMN status TEXT NOT NULL DEFAULT 'succeeded'
    CHECK (status IN ('succeeded', 'failed') AND (status = 'succeeded' OR amount_refunded = 0));
ALTER TABLE charges ADD COLUMN failure_code TEXT
    CHECK ((status = 'failed') = (failure_code IS NOT NULL));

CREATE INDEX charges_account_status_created_idx
    ON charges (account_id, status, created_at DESC, id DESC);
