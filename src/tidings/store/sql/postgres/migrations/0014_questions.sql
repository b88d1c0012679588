-- Questions (B15): what an MCP server asks a person (elicitation) or asks the conversation's
-- model to answer under an 'ask' policy (sampling), held durably on the conversation until a
-- person decides it once. A decision is terminal; nothing automatic ever answers.
-- Additive and idempotent.

CREATE TABLE IF NOT EXISTS questions (
    question_id text PRIMARY KEY,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    run_id text,
    task_id text,
    asker text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('elicitation', 'sampling')),
    ask_key text NOT NULL UNIQUE,
    message text NOT NULL,
    requested_schema text NOT NULL,
    status text NOT NULL
        CHECK (status IN ('pending', 'accepted', 'declined', 'cancelled', 'expired')),
    answer text,
    decided_by text,
    requested_at_us bigint NOT NULL,
    expires_at_us bigint NOT NULL,
    decided_at_us bigint,
    delivered_at_us bigint
);

CREATE INDEX IF NOT EXISTS questions_conversation
    ON questions (conversation_id, requested_at_us);
CREATE INDEX IF NOT EXISTS questions_pending
    ON questions (expires_at_us) WHERE status = 'pending';
