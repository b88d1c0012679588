-- Child conversations (M16, M17): each request a parent opened in a child (its brief, a later
-- send), the child's reply to it, and the level-triggered relay marker. Additive and
-- idempotent.

CREATE TABLE IF NOT EXISTS child_requests (
    request_id text PRIMARY KEY,
    parent_conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    child_conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    input_id text NOT NULL UNIQUE,
    run_public_id text NOT NULL,
    call_id text NOT NULL,
    task_key text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('spawn', 'send')),
    environment text NOT NULL,
    state text NOT NULL CHECK (state IN ('open', 'replied', 'cancelled')),
    reply_status text,
    reply text,
    reply_run_id text,
    created_at_us bigint NOT NULL,
    replied_at_us bigint,
    relayed_at_us bigint
);

CREATE INDEX IF NOT EXISTS child_requests_unrelayed
    ON child_requests (replied_at_us) WHERE state = 'replied' AND relayed_at_us IS NULL;
CREATE INDEX IF NOT EXISTS child_requests_parent
    ON child_requests (parent_conversation_id, created_at_us);
