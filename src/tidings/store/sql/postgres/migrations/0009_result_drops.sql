-- What a result's writer had to leave out to keep it within its bound (R1): for each cut, the
-- stream and the byte span dropped, as JSON. A result with a row here is truncated, not whole.
-- Purged by its own deadline (the envelope's). Additive and idempotent.

CREATE TABLE IF NOT EXISTS result_drops (
    result_id text PRIMARY KEY,
    drops text NOT NULL,
    expires_at_us bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS result_drops_expiry ON result_drops (expires_at_us);
