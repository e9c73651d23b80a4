-- See migrations/postgres/2026-12-07-000002_events_and_webhooks. UUIDs and
-- times are TEXT (times fixed-width RFC 3339, so text order is time order).
-- SQLite is one process: a sender claims rows in a write transaction, which
-- SQLite serializes, instead of with SKIP LOCKED.
CREATE TABLE events (
    id          TEXT PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts (id),
    type        TEXT NOT NULL
                CHECK (type IN ('charge.succeeded', 'charge.failed', 'charge.refunded')),
    data        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

CREATE INDEX events_account_created_idx ON events (account_id, created_at DESC, id DESC);
CREATE INDEX events_account_type_created_idx
    ON events (account_id, type, created_at DESC, id DESC);

CREATE TABLE webhook_endpoints (
    id                         TEXT PRIMARY KEY,
    account_id                 INTEGER NOT NULL REFERENCES accounts (id),
    url                        TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    description                TEXT,
    enabled_events             TEXT NOT NULL,
    secret                     TEXT NOT NULL,
    previous_secret            TEXT,
    previous_secret_expires_at TEXT,
    status                     TEXT NOT NULL DEFAULT 'enabled'
                               CHECK (status IN ('enabled', 'disabled')),
    disabled_reason            TEXT,
    created_at                 TEXT NOT NULL,
    CONSTRAINT webhook_endpoints_previous_secret_expires
        CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL))
);

CREATE INDEX webhook_endpoints_account_created_idx
    ON webhook_endpoints (account_id, created_at DESC, id DESC);

CREATE TABLE webhook_deliveries (
    event_id        TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint_id     TEXT NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    account_id      INTEGER NOT NULL REFERENCES accounts (id),
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at TEXT,
    claim_token     TEXT,
    claimed_until   TEXT,
    created_at      TEXT NOT NULL,
    PRIMARY KEY (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_pending_is_scheduled
        CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_claim_has_deadline
        CHECK ((claim_token IS NULL) = (claimed_until IS NULL))
);

CREATE INDEX webhook_deliveries_due_idx
    ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id);

CREATE TABLE webhook_attempts (
    event_id          TEXT NOT NULL,
    endpoint_id       TEXT NOT NULL,
    attempt           INTEGER NOT NULL CHECK (attempt >= 1),
    webhook_timestamp INTEGER NOT NULL,
    attempted_at      TEXT NOT NULL,
    response_status   INTEGER,
    error             TEXT,
    duration_ms       INTEGER NOT NULL CHECK (duration_ms >= 0),
    PRIMARY KEY (event_id, endpoint_id, attempt),
    FOREIGN KEY (event_id, endpoint_id)
        REFERENCES webhook_deliveries (event_id, endpoint_id) ON DELETE CASCADE
);
