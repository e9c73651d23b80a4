-- pgbench script for bench/run: the SQL that one idempotent POST /charges (a
-- first request, fresh key, atomic mode) executes, as the server sends it:
-- one READ COMMITTED transaction of two prepared statements, the key row
-- written completed with its 201 (a charge announces its response) and the
-- charge (see crates/idempotency/src/atomic.rs and key_table.rs; checked
-- against log_statement=all). Run with -D account=ID -D fp=FINGERPRINT
-- -D run=R -D n=0: :n counts this client's requests and R differs per
-- pgbench run, so each key is unique by construction (16 random hex digits,
-- run and client id, the counter: 36 characters, the length of a client's
-- UUID key). No ':' inside string literals: in -M prepared pgbench turns
-- every :word into a parameter.
--
-- What the server does and pgbench does not: HTTP, JSON parsing, SHA-256
-- fingerprint, rendering the 201, r2d2 checkout, web::block hand-off. What
-- pgbench does and the server does not: it builds the key text and the
-- stored JSON in SQL instead of binding them (a few microseconds).
\set n :n + 1
\set r random(0, 9223372036854775806)
\set cid random(0, 9223372036854775806)
BEGIN TRANSACTION ISOLATION LEVEL READ COMMITTED;
INSERT INTO idempotency_keys (account_id, key, fingerprint, status, response_status,
        response_headers, response_body, created_at, expires_at, locked_until, lease_token)
VALUES (:account,
        lpad(to_hex(:r::bigint), 16, '0') || '-' || lpad(to_hex(:run::int * 4096 + :client_id::int), 7, '0') || '-' || lpad(to_hex(:n::bigint), 11, '0'),
        :fp, 'completed', 201,
        jsonb_build_object('content-type', 'application/json', 'location', '/charges/' || md5(:cid::text)::uuid),
        jsonb_build_object('id', md5(:cid::text)::uuid, 'object', 'charge', 'amount', 1000, 'amount_refunded', 0,
                           'currency', 'jpy', 'description', 'bench',
                           'created_at', (to_jsonb(now() AT TIME ZONE 'UTC') #>> '{}') || 'Z'),
        CURRENT_TIMESTAMP, now() + '24:00:00'::interval, now() + '00:00:00'::interval,
        '6a0f4bd2-3c8e-4f57-9d0e-1b2c3d4e5f60')
ON CONFLICT (account_id, key) DO NOTHING
RETURNING account_id;
INSERT INTO charges (id, account_id, amount, amount_refunded, currency, description, created_at)
VALUES (md5(:cid::text)::uuid, :account, 1000, 0, 'jpy', 'bench', now());
COMMIT;
