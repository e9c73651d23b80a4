-- Events and webhooks (issue #48).
--
-- events is the transactional outbox: a row is written in the transaction that
-- writes the charge or refund it describes, so an event is never published
-- without its charge and never lost with it. `data` is the event's
-- data.object as serialized when it happened (TEXT, not JSONB: every delivery
-- of an event sends, and signs, the same bytes).
CREATE TABLE events (
    id          UUID PRIMARY KEY,
    account_id  BIGINT NOT NULL REFERENCES accounts (id),
    type        TEXT NOT NULL
                CHECK (type IN ('charge.succeeded', 'charge.failed', 'charge.refunded')),
    data        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);

-- GET /events and GET /events?type=…: keyset pages, newest first.
CREATE INDEX events_account_created_idx ON events (account_id, created_at DESC, id DESC);
CREATE INDEX events_account_type_created_idx
    ON events (account_id, type, created_at DESC, id DESC);

-- Where an account's events are sent. The secret signs every delivery; while a
-- rotation's grace period lasts, deliveries are signed with the previous
-- secret too (the signature header carries both).
CREATE TABLE webhook_endpoints (
    id                         UUID PRIMARY KEY,
    account_id                 BIGINT NOT NULL REFERENCES accounts (id),
    url                        TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    description                TEXT,
    -- A JSON array of event types, or ["*"].
    enabled_events             TEXT NOT NULL,
    secret                     TEXT NOT NULL,
    previous_secret            TEXT,
    previous_secret_expires_at TIMESTAMPTZ,
    status                     TEXT NOT NULL DEFAULT 'enabled'
                               CHECK (status IN ('enabled', 'disabled')),
    -- Why an endpoint was disabled (its receiver answered 410 Gone, say).
    disabled_reason            TEXT,
    created_at                 TIMESTAMPTZ NOT NULL,
    CONSTRAINT webhook_endpoints_previous_secret_expires
        CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL))
);

CREATE INDEX webhook_endpoints_account_created_idx
    ON webhook_endpoints (account_id, created_at DESC, id DESC);

-- One row per event and endpoint: the delivery still owed, or how it ended.
-- A sender claims a due row by setting claim_token and claimed_until (with
-- FOR NO KEY UPDATE SKIP LOCKED on PostgreSQL, so several instances never
-- claim the same row), and records an attempt only while its token is the
-- row's: a sender whose claim expired and was taken over records nothing.
CREATE TABLE webhook_deliveries (
    event_id        UUID NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint_id     UUID NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    account_id      BIGINT NOT NULL REFERENCES accounts (id),
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at TIMESTAMPTZ,
    claim_token     UUID,
    claimed_until   TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_pending_is_scheduled
        CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_claim_has_deadline
        CHECK ((claim_token IS NULL) = (claimed_until IS NULL))
);

-- The sender's poll: due pending rows, oldest first. Finished rows are not in it.
CREATE INDEX webhook_deliveries_due_idx
    ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id);

-- Every attempt, for GET /events/{id}/deliveries: when, what the receiver
-- answered (NULL when it did not: a timeout or a refused connection) and why.
CREATE TABLE webhook_attempts (
    event_id        UUID NOT NULL,
    endpoint_id     UUID NOT NULL,
    attempt         INTEGER NOT NULL CHECK (attempt >= 1),
    webhook_timestamp BIGINT NOT NULL,
    attempted_at    TIMESTAMPTZ NOT NULL,
    response_status INTEGER,
    error           TEXT,
    duration_ms     BIGINT NOT NULL CHECK (duration_ms >= 0),
    PRIMARY KEY (event_id, endpoint_id, attempt),
    FOREIGN KEY (event_id, endpoint_id)
        REFERENCES webhook_deliveries (event_id, endpoint_id) ON DELETE CASCADE
);
