-- pgbench script for bench/run: the SQL that one idempotent POST /charges
-- (a first request, fresh key) executes, statement for statement, as Diesel
-- sends it (see src/idempotency/store.rs, src/idempotency/mod.rs, src/db.rs;
-- checked against log_statement=all). Run with -D account=ID -D fp=FINGERPRINT
-- -D run=R -D n=0: :n counts this client's transactions and R differs per
-- pgbench run, so each key is unique by construction (16 random hex digits,
-- run and client id, the counter: 36 characters, the length of a client's
-- UUID key). No ':' inside string literals: in
-- -M prepared pgbench turns every :word into a parameter.
--
-- What the server does and pgbench does not: HTTP, JSON parsing, SHA-256
-- fingerprint, r2d2 checkout, web::block hand-off. What pgbench does and the
-- server does not: it builds the key text and the stored JSON in SQL instead of
-- binding them (a few microseconds of server CPU).
\set n :n + 1
\set r random(0, 9223372036854775806)
-- (0) fast-path replay check, outside the transaction, no lock
SELECT id, fingerprint, status, response_status, response_headers, response_body,
       locked_until > CURRENT_TIMESTAMP AS lease_live
  FROM idempotency_keys
 WHERE account_id = :account
   AND key = lpad(to_hex(:r::bigint), 16, '0') || '-' || lpad(to_hex(:run::int * 4096 + :client_id::int), 7, '0') || '-' || lpad(to_hex(:n::bigint), 11, '0')
   AND expires_at > CURRENT_TIMESTAMP
 LIMIT 1;
BEGIN TRANSACTION ISOLATION LEVEL READ COMMITTED;
-- (1) claim the key
INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, locked_until, lease_token)
VALUES (:account,
        lpad(to_hex(:r::bigint), 16, '0') || '-' || lpad(to_hex(:run::int * 4096 + :client_id::int), 7, '0') || '-' || lpad(to_hex(:n::bigint), 11, '0'),
        :fp, 'in_progress', CURRENT_TIMESTAMP, now() + '24:00:00'::interval, now() + '00:00:30'::interval,
        '6a0f4bd2-3c8e-4f57-9d0e-1b2c3d4e5f60')
ON CONFLICT (account_id, key) DO UPDATE SET
    fingerprint = excluded.fingerprint, status = excluded.status,
    response_status = NULL, response_headers = NULL, response_body = NULL, charge_id = NULL,
    created_at = excluded.created_at, expires_at = excluded.expires_at,
    locked_until = excluded.locked_until, lease_token = excluded.lease_token
  WHERE idempotency_keys.expires_at <= CURRENT_TIMESTAMP
     OR (idempotency_keys.status = 'in_progress' AND idempotency_keys.locked_until < CURRENT_TIMESTAMP
         AND idempotency_keys.fingerprint = excluded.fingerprint)
RETURNING id AS key_id \gset
-- (2) the charge
INSERT INTO charges (id, account_id, amount, currency, description)
VALUES (gen_random_uuid(), :account, 1000, 'jpy', 'bench')
RETURNING id AS charge_id, account_id, amount, currency, description, created_at \gset c_
-- (3) store the response to replay
UPDATE idempotency_keys SET
    status = 'completed',
    response_status = 201,
    response_headers = jsonb_build_object('content-type', 'application/json',
                                          'location', '/charges/' || :c_charge_id::text),
    response_body = jsonb_build_object('id', :c_charge_id::uuid, 'object', 'charge',
                                       'amount', :c_amount::bigint, 'currency', :c_currency::text,
                                       'description', :c_description::text,
                                       'created_at', (to_jsonb(:c_created_at::timestamptz AT TIME ZONE 'UTC') #>> '{}') || 'Z'),
    charge_id = :c_charge_id::uuid
 WHERE id = :key_id AND status = 'in_progress' AND lease_token = '6a0f4bd2-3c8e-4f57-9d0e-1b2c3d4e5f60';
COMMIT;
