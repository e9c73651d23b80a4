-- The demo's unguarded table (see 2026-12-01-000004) is the demo's own now:
-- its sandbox creates it in demo mode (src/demo/queries/postgres.rs), and no
-- production database keeps it. Databases made before hold it and list
-- 2026-12-01-000004 as applied, so that migration stays and this one drops
-- the table (and its demo-only rows) from them.
DROP TABLE IF EXISTS demo_unguarded_keys;
