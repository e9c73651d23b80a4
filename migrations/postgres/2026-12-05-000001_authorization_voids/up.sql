-- Atomic phases (issue #27). In the network's database: when an
-- authorization was voided (a compensating call of the API's, for an
-- authorization no charge will ever hold: its account was revoked before
-- the charge could be completed).
ALTER TABLE authorizations ADD COLUMN voided_at TIMESTAMPTZ;
