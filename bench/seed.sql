-- bench/run, phase 5: :rows idempotency keys that a day of traffic left
-- behind, each with its charge, as one INSERT ... SELECT (no round trip per
-- row). They expired an hour ago and the purge has not removed them yet: the
-- backlog phase 5b purges while new charges come in. Keys are UUIDs, as
-- clients send them, so the unique index is as wide and as random as in use.
-- psql -v account=ID -v rows=N
WITH c AS (
    INSERT INTO charges (id, account_id, amount, currency, description, created_at)
    SELECT gen_random_uuid(), :account, 1000, 'jpy', 'seed',
           now() - interval '25 hours' + g * interval '1 millisecond'
      FROM generate_series(1, :rows) AS g
    RETURNING id, amount, currency, description, created_at
)
INSERT INTO idempotency_keys (account_id, key, fingerprint, status, response_status,
                              response_headers, response_body, created_at, expires_at,
                              locked_until, lease_token)
SELECT :account, gen_random_uuid()::text,
       'sha256:' || encode(sha256(c.id::text::bytea), 'hex'),
       'completed', 201,
       jsonb_build_object('content-type', 'application/json', 'location', '/charges/' || c.id),
       jsonb_build_object('id', c.id, 'object', 'charge', 'amount', c.amount,
                          'currency', c.currency, 'description', c.description,
                          'created_at', (to_jsonb(c.created_at AT TIME ZONE 'UTC') #>> '{}') || 'Z'),
       c.created_at, c.created_at + interval '24 hours', c.created_at, gen_random_uuid()
  FROM c;
