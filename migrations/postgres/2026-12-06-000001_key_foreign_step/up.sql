-- Which foreign step (the card network, by its NETWORK_ID) a key left in
-- progress was registered with, so that recovery finishes it only where that
-- same step can be performed, never without it nor at another ledger
-- (issue #38). NULL: an operation with no foreign step.
ALTER TABLE idempotency_keys ADD COLUMN foreign_step TEXT;

-- In the in-process card network's own database: the merchant key every
-- instance's in-process network shares, made by the first to start, so that
-- several instances on one database all charge (issue #37). Empty elsewhere.
CREATE TABLE in_process_network_keys (
    name    TEXT PRIMARY KEY,
    api_key TEXT NOT NULL
);
