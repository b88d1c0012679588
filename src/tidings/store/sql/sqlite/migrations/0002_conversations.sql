-- Conversations, the single door, runs, the transcript and the event journal
-- (SPEC C1-C9, M1-M3, S7). Additive and idempotent.
--
-- The conversation row is the conversation's lock: every unit that writes one of its inputs,
-- messages or events reads and updates its counters, so positions are gap-free and commit
-- ordered on both backends, and a client can resume "after sequence N".

CREATE TABLE IF NOT EXISTS conversations (
    conversation_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    title TEXT NOT NULL,
    profile TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'archived', 'tombstoned')),
    goal_status TEXT NOT NULL
        CHECK (goal_status IN ('none', 'active', 'paused', 'blocked', 'done')),
    goal_text TEXT,
    suppressed INTEGER NOT NULL DEFAULT 0,
    awaiting_person INTEGER NOT NULL DEFAULT 0,
    queued_inputs INTEGER NOT NULL DEFAULT 0,
    last_queue_position INTEGER NOT NULL DEFAULT 0,
    last_message_seq INTEGER NOT NULL DEFAULT 0,
    last_event_seq INTEGER NOT NULL DEFAULT 0,
    history_start_seq INTEGER NOT NULL DEFAULT 0,
    slot_token TEXT,
    slot_deadline_us INTEGER,
    slot_instance TEXT,
    slot_run TEXT,
    created_at_us INTEGER NOT NULL,
    updated_at_us INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS conversations_owner ON conversations (owner, conversation_id);
CREATE INDEX IF NOT EXISTS conversations_slot
    ON conversations (slot_deadline_us) WHERE slot_token IS NOT NULL;

CREATE TABLE IF NOT EXISTS inputs (
    input_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    queue_position INTEGER NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('person', 'agent', 'task_result', 'child')),
    kernel INTEGER NOT NULL,
    author_kind TEXT NOT NULL CHECK (author_kind IN ('human', 'agent')),
    author_handle TEXT NOT NULL,
    author_display_name TEXT NOT NULL,
    sender_conversation_id TEXT,
    run_public_id TEXT,
    task_key TEXT,
    delivery_mode TEXT NOT NULL CHECK (delivery_mode IN ('queue', 'steer')),
    content TEXT NOT NULL,
    meta TEXT NOT NULL,
    idempotency_key TEXT,
    state TEXT NOT NULL CHECK (state IN ('queued', 'materialized', 'cancelled')),
    run_id TEXT,
    accepted_at_us INTEGER NOT NULL,
    materialized_at_us INTEGER,
    message_seq INTEGER,
    UNIQUE (conversation_id, queue_position),
    UNIQUE (conversation_id, idempotency_key)
);

-- The read order (M2): kernel rows first, then arrival.
CREATE INDEX IF NOT EXISTS inputs_queued
    ON inputs (conversation_id, kernel DESC, queue_position) WHERE state = 'queued';

CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    trigger TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed',
                                           'needs_attention', 'stopped')),
    model TEXT,
    failure_code TEXT,
    instance_id TEXT,
    steps INTEGER NOT NULL DEFAULT 0,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    created_at_us INTEGER NOT NULL,
    started_at_us INTEGER,
    ended_at_us INTEGER
);

CREATE INDEX IF NOT EXISTS runs_conversation ON runs (conversation_id, created_at_us);

CREATE TABLE IF NOT EXISTS messages (
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL UNIQUE,
    run_id TEXT,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content TEXT NOT NULL,
    tool_calls TEXT,
    tool_call_id TEXT,
    tool_name TEXT,
    origin TEXT,
    input_id TEXT,
    meta TEXT NOT NULL,
    created_at_us INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);

-- One row per tool call an assistant message made; result_seq stays NULL while it is open.
-- While any call of a conversation is open, only results may be appended (strict pairing).
CREATE TABLE IF NOT EXISTS tool_calls (
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    call_seq INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    run_id TEXT,
    result_seq INTEGER,
    PRIMARY KEY (conversation_id, call_seq, call_id)
);

CREATE INDEX IF NOT EXISTS tool_calls_open
    ON tool_calls (conversation_id, call_id) WHERE result_seq IS NULL;

CREATE TABLE IF NOT EXISTS events (
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    run_id TEXT,
    data TEXT NOT NULL,
    at_us INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);
