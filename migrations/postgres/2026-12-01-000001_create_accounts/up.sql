-- Tenants of the API. The API key is kept only as its SHA-256 hex digest.
CREATE TABLE accounts (
    id          BIGSERIAL PRIMARY KEY,
    name        TEXT NOT NULL,
    api_key_sha256 TEXT NOT NULL UNIQUE CHECK (api_key_sha256 ~ '^[0-9a-f]{64}$'),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
