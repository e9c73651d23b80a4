-- The webhook inbox, PostgreSQL: one row per event a receiver has acted
-- on, inserted in the transaction of its effect with `INSERT … ON CONFLICT
-- (source, event_id) DO NOTHING`; a concurrent delivery of the same event
-- waits on its index entry. `source` names the sender, if you receive from
-- several.
CREATE TABLE webhook_inbox (
    source      TEXT NOT NULL CHECK (length(source) BETWEEN 1 AND 255),
    -- webhook-id: the same on every attempt of one event.
    event_id    TEXT NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (source, event_id)
);

-- The purge finds old rows without sorting them (rows arrive in time order).
CREATE INDEX webhook_inbox_received_at_brin ON webhook_inbox USING brin (received_at);
