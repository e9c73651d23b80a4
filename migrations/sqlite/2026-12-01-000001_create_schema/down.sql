DROP TABLE demo_unguarded_keys;
DROP TABLE idempotency_keys;
DROP TABLE charges;
DROP TABLE accounts;
