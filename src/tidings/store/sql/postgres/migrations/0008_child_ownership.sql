-- Who owns a child's first report (M16): a turn-owned spawn's reply settles in the run that
-- opened it (owner_run), which consumes it in-run (consumed_in_run) before its reply is final;
-- only once that run has ended unconsumed does the reply become ordinary child mail. Additive
-- and idempotent.

CREATE TABLE IF NOT EXISTS turn_owned_requests (
    request_id text PRIMARY KEY REFERENCES child_requests (request_id),
    owner_run text NOT NULL,
    consumed_in_run text
);

CREATE INDEX IF NOT EXISTS turn_owned_requests_owner ON turn_owned_requests (owner_run);
