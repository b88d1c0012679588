-- A conversation's approvals, newest first, reached through an index instead of a scan of
-- every conversation's approvals. Additive and idempotent.

CREATE INDEX IF NOT EXISTS approvals_conversation
    ON approvals (conversation_id, requested_at_us);
