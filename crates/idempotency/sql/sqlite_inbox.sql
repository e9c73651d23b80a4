-- The webhook inbox, SQLite: as sql/postgres_inbox.sql, its time as TEXT
-- (RFC 3339 in UTC with microseconds, which sorts as it compares).
CREATE TABLE webhook_inbox (
    source      TEXT NOT NULL CHECK (length(source) BETWEEN 1 AND 255),
    event_id    TEXT NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    received_at TEXT NOT NULL,
    PRIMARY KEY (source, event_id)
);

CREATE INDEX webhook_inbox_received_at_idx ON webhook_inbox (received_at);
