-- The protocol is generic: a key row keeps the request's fingerprint and the
-- response to replay, whatever operation ran under it (a charge, a refund),
-- so it no longer points at the charges table. The response's Location
-- header names what was created.
ALTER TABLE idempotency_keys DROP COLUMN charge_id;

-- Refunds, the second operation under a key. The sum of a charge's refunds
-- is kept on the charge and bounded there, so that concurrent refunds are
-- decided on one row: each waits for its lock and checks the sum it finds.
ALTER TABLE charges
    ADD COLUMN amount_refunded BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT charges_amount_refunded_bounded
        CHECK (amount_refunded >= 0 AND amount_refunded <= amount);

CREATE TABLE refunds (
    id          UUID PRIMARY KEY,
    charge_id   UUID NOT NULL REFERENCES charges (id),
    account_id  BIGINT NOT NULL REFERENCES accounts (id),
    amount      BIGINT NOT NULL CHECK (amount > 0),
    currency    TEXT NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    created_at  TIMESTAMPTZ NOT NULL
);

-- GET /charges/{id}/refunds lists a charge's refunds newest first.
CREATE INDEX refunds_charge_created_idx ON refunds (charge_id, created_at DESC, id DESC);
