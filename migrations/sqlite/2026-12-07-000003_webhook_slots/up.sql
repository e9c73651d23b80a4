-- The sender's slots (issue #48): a healthy endpoint gets several deliveries
-- in flight at once, a failing one (its last attempt failed) one, and the
-- endpoints with due deliveries take turns, least recently served first.
ALTER TABLE webhook_endpoints ADD COLUMN failing INTEGER NOT NULL DEFAULT 0 CHECK (failing IN (0, 1));
ALTER TABLE webhook_endpoints ADD COLUMN served_at TEXT;

-- An endpoint's due deliveries: the claim probes a few rows per endpoint,
-- never every pending row (the old claim grouped them all). It replaces the
-- index on endpoint_id alone, which the foreign key's cascade still uses.
DROP INDEX webhook_deliveries_endpoint_idx;
CREATE INDEX webhook_deliveries_endpoint_idx
    ON webhook_deliveries (endpoint_id, status, next_attempt_at);
-- The deliveries in flight (claimed): a few rows, counted per endpoint.
CREATE INDEX webhook_deliveries_claimed_idx
    ON webhook_deliveries (endpoint_id) WHERE claim_token IS NOT NULL;
