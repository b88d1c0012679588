-- Questions (B15): what an MCP server asks a person (elicitation) or asks the conversation's
-- model to answer under an 'ask' policy (sampling), held durably on the conversation until a
-- person decides it once. A decision is terminal; nothing automatic ever answers.
-- Additive and idempotent.

CREATE TABLE IF NOT EXISTS questions (
    question_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    run_id TEXT,
    task_id TEXT,
    asker TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('elicitation', 'sampling')),
    ask_key TEXT NOT NULL UNIQUE,
    message TEXT NOT NULL,
    requested_schema TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('pending', 'accepted', 'declined', 'cancelled', 'expired')),
    answer TEXT,
    decided_by TEXT,
    requested_at_us INTEGER NOT NULL,
    expires_at_us INTEGER NOT NULL,
    decided_at_us INTEGER,
    delivered_at_us INTEGER
);

CREATE INDEX IF NOT EXISTS questions_conversation
    ON questions (conversation_id, requested_at_us);
CREATE INDEX IF NOT EXISTS questions_pending
    ON questions (expires_at_us) WHERE status = 'pending';
