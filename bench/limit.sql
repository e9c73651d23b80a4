-- pgbench script for bench/run: the SQL that one idempotent POST /charges (a
-- first request, fresh key) executes, as the server sends it: one statement,
-- autocommit (see CHARGE_ONCE in src/store/postgres.rs; checked against
-- log_statement=all). Run with -D account=ID -D fp=FINGERPRINT -D run=R
-- -D n=0: :n counts this client's requests and R differs per pgbench run,
-- so each key is unique by construction (16 random hex digits, run and
-- client id, the counter: 36 characters, the length of a client's UUID key).
-- No ':' inside string literals: in -M prepared pgbench turns every :word
-- into a parameter.
--
-- What the server does and pgbench does not: HTTP, JSON parsing, SHA-256
-- fingerprint, rendering the 201, r2d2 checkout, web::block hand-off. What
-- pgbench does and the server does not: it builds the key text and the
-- stored JSON in SQL instead of binding them (a few microseconds).
\set n :n + 1
\set r random(0, 9223372036854775806)
\set cid random(0, 9223372036854775806)
WITH existing AS (
    SELECT k.fingerprint, k.status, k.response_status, k.response_headers, k.response_body,
           k.locked_until > now() AS lease_live
      FROM idempotency_keys k
     WHERE k.account_id = :account
       AND k.key = lpad(to_hex(:r::bigint), 16, '0') || '-' || lpad(to_hex(:run::int * 4096 + :client_id::int), 7, '0') || '-' || lpad(to_hex(:n::bigint), 11, '0')
       AND NOT (k.expires_at <= now() OR (k.status = 'in_progress' AND k.locked_until < now() AND k.fingerprint = :fp))),
claimed AS (
    INSERT INTO idempotency_keys AS k (account_id, key, fingerprint, status, response_status,
        response_headers, response_body, charge_id, created_at, expires_at, locked_until, lease_token)
    SELECT :account,
           lpad(to_hex(:r::bigint), 16, '0') || '-' || lpad(to_hex(:run::int * 4096 + :client_id::int), 7, '0') || '-' || lpad(to_hex(:n::bigint), 11, '0'),
           :fp, 'completed', 201,
           jsonb_build_object('content-type', 'application/json', 'location', '/charges/' || md5(:cid::text)::uuid),
           jsonb_build_object('id', md5(:cid::text)::uuid, 'object', 'charge', 'amount', 1000, 'currency', 'jpy',
                              'description', 'bench', 'created_at', (to_jsonb(now() AT TIME ZONE 'UTC') #>> '{}') || 'Z'),
           md5(:cid::text)::uuid, now(), now() + '24:00:00'::interval, now(), '6a0f4bd2-3c8e-4f57-9d0e-1b2c3d4e5f60'
     WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (account_id, key) DO UPDATE SET
        fingerprint = excluded.fingerprint, status = excluded.status,
        response_status = excluded.response_status, response_headers = excluded.response_headers,
        response_body = excluded.response_body, charge_id = excluded.charge_id,
        created_at = excluded.created_at, expires_at = excluded.expires_at,
        locked_until = excluded.locked_until, lease_token = excluded.lease_token
     WHERE k.expires_at <= now() OR (k.status = 'in_progress' AND k.locked_until < now() AND k.fingerprint = excluded.fingerprint)
    RETURNING 1),
charge AS (
    INSERT INTO charges (id, account_id, amount, currency, description, created_at)
    SELECT md5(:cid::text)::uuid, :account, 1000, 'jpy', 'bench', now() FROM claimed
    RETURNING 1)
SELECT (SELECT count(*) FROM charge) AS written, e.*
  FROM (SELECT 1) AS one LEFT JOIN existing e ON true;
