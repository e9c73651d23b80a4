DROP TABLE refunds;
ALTER TABLE charges DROP COLUMN amount_refunded;
ALTER TABLE idempotency_keys ADD COLUMN charge_id UUID REFERENCES charges (id);
