-- The key-first design commits an in-progress row before the charge runs.
-- The worker that registered it holds a lease (token + deadline); only the
-- lease holder may complete the row, and once the deadline has passed (the
-- worker died) the next request with the key may take the row over. Every
-- claim sets both; on a completed row they are history.
ALTER TABLE idempotency_keys
    ADD COLUMN locked_until TIMESTAMPTZ NOT NULL DEFAULT now(),
    ADD COLUMN lease_token UUID NOT NULL DEFAULT gen_random_uuid();
