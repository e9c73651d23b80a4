-- Test payment methods and declines (issue #47). A charge records which test
-- payment method it was made with and how it ended: a decline is a result,
-- so a failed charge is a row like a successful one, with its code. Only test
-- ids are ever written here (this is a demo: it never holds a card number).
ALTER TABLE charges
    ADD COLUMN payment_method TEXT NOT NULL DEFAULT 'pm_card_visa'
        CHECK (payment_method ~ '^pm_card_[A-Za-z]+$'),
    ADD COLUMN status TEXT NOT NULL DEFAULT 'succeeded'
        CHECK (status IN ('succeeded', 'failed')),
    ADD COLUMN failure_code TEXT,
    ADD CONSTRAINT charges_failure_code_when_failed
        CHECK ((status = 'failed') = (failure_code IS NOT NULL)),
    -- A failed charge took no money, so none of it can be refunded.
    ADD CONSTRAINT charges_failed_never_refunded
        CHECK (status = 'succeeded' OR amount_refunded = 0);

-- GET /charges?status=…: a page of one status costs what a page of all does.
CREATE INDEX charges_account_status_created_idx
    ON charges (account_id, status, created_at DESC, id DESC);
