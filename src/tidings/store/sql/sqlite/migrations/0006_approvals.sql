-- Approvals (L5): a tool call that needs a person's decision holds its run until it is made.
-- A decision is terminal; applying is a fenced transition from approved to applied.
-- Additive and idempotent.

CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    arguments TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'applied')),
    decided_by TEXT,
    requested_at_us INTEGER NOT NULL,
    expires_at_us INTEGER NOT NULL,
    decided_at_us INTEGER,
    applied_at_us INTEGER,
    UNIQUE (run_id, call_id)
);

CREATE INDEX IF NOT EXISTS approvals_pending
    ON approvals (conversation_id) WHERE status = 'pending';
