-- The demo's unguarded table (made by 2026-12-01-000001_create_schema) is
-- the demo's own now: its sandbox creates it in demo mode
-- (src/demo/queries/sqlite.rs), and no production database keeps it.
-- Databases made before hold it and list that migration as applied, so it
-- stays as it was and this one drops the table.
DROP TABLE IF EXISTS demo_unguarded_keys;
