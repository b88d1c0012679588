-- Child conversations (M16, M17): each request a parent opened in a child (its brief, a later
-- send), the child's reply to it, and the level-triggered relay marker. Additive and
-- idempotent.

CREATE TABLE IF NOT EXISTS child_requests (
    request_id TEXT PRIMARY KEY,
    parent_conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    child_conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    input_id TEXT NOT NULL UNIQUE,
    run_public_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    task_key TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('spawn', 'send')),
    environment TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'replied', 'cancelled')),
    reply_status TEXT,
    reply TEXT,
    reply_run_id TEXT,
    created_at_us INTEGER NOT NULL,
    replied_at_us INTEGER,
    relayed_at_us INTEGER
);

CREATE INDEX IF NOT EXISTS child_requests_unrelayed
    ON child_requests (replied_at_us) WHERE state = 'replied' AND relayed_at_us IS NULL;
CREATE INDEX IF NOT EXISTS child_requests_parent
    ON child_requests (parent_conversation_id, created_at_us);
