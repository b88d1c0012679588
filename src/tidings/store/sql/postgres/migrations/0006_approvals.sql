-- Approvals (L5): a tool call that needs a person's decision holds its run until it is made.
-- A decision is terminal; applying is a fenced transition from approved to applied.
-- Additive and idempotent.

CREATE TABLE IF NOT EXISTS approvals (
    approval_id text PRIMARY KEY,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    run_id text NOT NULL,
    call_id text NOT NULL,
    tool_name text NOT NULL,
    arguments text NOT NULL,
    status text NOT NULL
        CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'applied')),
    decided_by text,
    requested_at_us bigint NOT NULL,
    expires_at_us bigint NOT NULL,
    decided_at_us bigint,
    applied_at_us bigint,
    UNIQUE (run_id, call_id)
);

CREATE INDEX IF NOT EXISTS approvals_pending
    ON approvals (conversation_id) WHERE status = 'pending';
