DROP INDEX webhook_deliveries_claimed_idx;
DROP INDEX webhook_deliveries_endpoint_idx;
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id);
ALTER TABLE webhook_endpoints DROP COLUMN served_at;
ALTER TABLE webhook_endpoints DROP COLUMN failing;
