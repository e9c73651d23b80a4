DROP INDEX webhook_deliveries_claimed_idx;
DROP INDEX webhook_deliveries_endpoint_due_idx;
ALTER TABLE webhook_endpoints DROP COLUMN served_at;
ALTER TABLE webhook_endpoints DROP COLUMN failing;
