-- Money is an integer amount of the currency's minor unit (1 JPY, 1 cent of USD).
CREATE TABLE charges (
    id          UUID PRIMARY KEY,
    account_id  BIGINT NOT NULL REFERENCES accounts (id),
    amount      BIGINT NOT NULL CHECK (amount > 0),
    currency    TEXT NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    description TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- GET /charges lists an account's charges newest first.
CREATE INDEX charges_account_created_idx ON charges (account_id, created_at DESC, id DESC);
