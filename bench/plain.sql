-- pgbench script for bench/run: the SQL of a POST /charges without an
-- Idempotency-Key, as the server sends it: one INSERT, autocommit (the
-- charge's id and time are chosen by the server; here by pgbench). With
-- limit.sql it gives the ceiling of the ratio keyed / plain: what PostgreSQL
-- itself does with the two statements, with no server in front.
\set cid random(0, 9223372036854775806)
INSERT INTO charges (id, account_id, amount, amount_refunded, currency, description, created_at)
VALUES (md5(:cid::text)::uuid, :account, 1000, 0, 'jpy', 'bench', now());
