DROP TABLE in_process_network_keys;
ALTER TABLE idempotency_keys DROP COLUMN foreign_step;
