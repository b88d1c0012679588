-- The current schema, as the migrations build it (a test holds the two equal).

CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at_us INTEGER NOT NULL,
    heartbeat_at_us INTEGER NOT NULL,
    stopped_at_us INTEGER,
    reconciled_at_us INTEGER
);

CREATE INDEX IF NOT EXISTS instances_unreconciled
    ON instances (started_at_us) WHERE reconciled_at_us IS NULL;

CREATE TABLE IF NOT EXISTS operations (
    operation_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    owner TEXT NOT NULL,
    origin_instance TEXT NOT NULL REFERENCES instances (instance_id),
    idempotency_key TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('accepted', 'completed', 'failed', 'outcome_unknown')),
    outcome TEXT,
    failure_code TEXT,
    accepted_at_us INTEGER NOT NULL,
    settled_at_us INTEGER,
    UNIQUE (owner, idempotency_key)
);

CREATE INDEX IF NOT EXISTS operations_unsettled
    ON operations (origin_instance) WHERE state = 'accepted';

CREATE TABLE IF NOT EXISTS signal_events (
    seq INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    operation_id TEXT REFERENCES operations (operation_id),
    conversation_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    payload TEXT NOT NULL,
    payload_bytes INTEGER NOT NULL,
    schema_version INTEGER NOT NULL,
    published_at_us INTEGER NOT NULL,
    UNIQUE (conversation_id, idempotency_key)
);

CREATE TABLE IF NOT EXISTS signal_queues (
    conversation_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL DEFAULT 0,
    head_seq INTEGER NOT NULL DEFAULT 0,
    backlog INTEGER NOT NULL DEFAULT 0,
    dead_letters INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS signal_deliveries (
    delivery_id INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL REFERENCES signal_events (event_id) ON DELETE CASCADE,
    conversation_id TEXT NOT NULL,
    queue_seq INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'acknowledged', 'dead_letter')),
    attempts INTEGER NOT NULL DEFAULT 0,
    claimable_at_us INTEGER NOT NULL,
    lease_token TEXT,
    lease_deadline_us INTEGER,
    lease_instance TEXT,
    lease_owner TEXT,
    payload_bytes INTEGER NOT NULL,
    failure_code TEXT,
    published_at_us INTEGER NOT NULL,
    settled_at_us INTEGER,
    UNIQUE (event_id, conversation_id)
);

CREATE INDEX IF NOT EXISTS signal_deliveries_queue
    ON signal_deliveries (conversation_id, queue_seq) WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS signal_deliveries_acknowledged
    ON signal_deliveries (settled_at_us) WHERE state = 'acknowledged';
CREATE INDEX IF NOT EXISTS signal_deliveries_dead
    ON signal_deliveries (conversation_id, delivery_id) WHERE state = 'dead_letter';

-- Every event has exactly one recipient (S11: no broadcast), so its delivery is written by the
-- engine in the same statement, numbered like the event, at the queue's freshly allocated
-- sequence (publish allocates it just before).
CREATE TRIGGER IF NOT EXISTS signal_events_deliver
AFTER INSERT ON signal_events
BEGIN
    INSERT INTO signal_deliveries (delivery_id, event_id, conversation_id, queue_seq, state,
                                   attempts, claimable_at_us, payload_bytes, published_at_us)
    VALUES (NEW.seq, NEW.event_id, NEW.conversation_id,
            (SELECT last_seq FROM signal_queues WHERE conversation_id = NEW.conversation_id),
            'ready', 0, NEW.published_at_us, NEW.payload_bytes, NEW.published_at_us);
END;

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

-- What a run's model calls spent, written with its end (a row only for a run that called a
-- model); input_tokens counts the cached prompt tokens too. A conversation's usage is the sum
-- of its rows.
CREATE TABLE IF NOT EXISTS run_usage (
    conversation_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    model_calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, run_id)
);

-- Which models a run that exhausted them asked, and why each failed (a JSON list), written
-- with its end.
CREATE TABLE IF NOT EXISTS run_failures (
    conversation_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    models TEXT NOT NULL,
    PRIMARY KEY (conversation_id, run_id)
);

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

CREATE TABLE IF NOT EXISTS result_envelopes (
    result_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    task_key TEXT,
    run_id TEXT,
    status TEXT NOT NULL CHECK (status IN ('stored', 'failed')),
    failure_code TEXT,
    size_bytes INTEGER NOT NULL,
    key_version INTEGER NOT NULL,
    nonce BLOB,
    ciphertext BLOB,
    created_at_us INTEGER NOT NULL,
    expires_at_us INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS result_envelopes_conversation
    ON result_envelopes (conversation_id, created_at_us);
CREATE INDEX IF NOT EXISTS result_envelopes_expiry ON result_envelopes (expires_at_us);

-- What a result's writer left out to keep it within its bound: the stream and byte span of each
-- cut, as JSON. A result with a row here is truncated, not whole.
CREATE TABLE IF NOT EXISTS result_drops (
    result_id TEXT PRIMARY KEY,
    drops TEXT NOT NULL,
    expires_at_us INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS result_drops_expiry ON result_drops (expires_at_us);

CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    task_key TEXT NOT NULL,
    run_id TEXT,
    call_id TEXT,
    command TEXT NOT NULL,
    notify TEXT NOT NULL CHECK (notify IN ('on_exit', 'never')),
    lifetime TEXT NOT NULL CHECK (lifetime IN ('turn', 'conversation')),
    state TEXT NOT NULL
        CHECK (state IN ('running', 'exited', 'failed', 'timed_out', 'killed', 'lost')),
    exit_code INTEGER,
    signal TEXT,
    event_id TEXT UNIQUE,
    committed INTEGER NOT NULL DEFAULT 0,
    handed_off INTEGER NOT NULL DEFAULT 0,
    delivered INTEGER NOT NULL DEFAULT 0,
    consumed INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    reported_in_tool_result INTEGER NOT NULL DEFAULT 0,
    continuation_error TEXT,
    notification_seq INTEGER,
    result_id TEXT,
    stdout_bytes INTEGER NOT NULL DEFAULT 0,
    stderr_bytes INTEGER NOT NULL DEFAULT 0,
    excerpt BLOB,
    excerpt_truncated INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER,
    instance_id TEXT NOT NULL,
    started_at_us INTEGER NOT NULL,
    ended_at_us INTEGER,
    UNIQUE (conversation_id, task_key)
);

CREATE INDEX IF NOT EXISTS tasks_running ON tasks (instance_id) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS tasks_undelivered
    ON tasks (conversation_id) WHERE state <> 'running' AND delivered = 0 AND cancelled = 0;
CREATE INDEX IF NOT EXISTS tasks_unconsumed
    ON tasks (conversation_id) WHERE delivered = 1 AND consumed = 0;

-- Where a background task's process runs (T9).
CREATE TABLE IF NOT EXISTS task_processes (
    task_id TEXT PRIMARY KEY REFERENCES tasks (task_id),
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    process_started TEXT
);

-- A task whose work runs on an MCP server (B5): the server, the tool and the server's task id.
CREATE TABLE IF NOT EXISTS mcp_tasks (
    task_id TEXT PRIMARY KEY REFERENCES tasks (task_id),
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    mcp_task_id TEXT NOT NULL
);

-- Approvals (L5).
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
CREATE INDEX IF NOT EXISTS approvals_conversation
    ON approvals (conversation_id, requested_at_us);

-- Child conversations (M16).
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

-- A turn-owned spawn's first report settles in the run that opened it (M16).
CREATE TABLE IF NOT EXISTS turn_owned_requests (
    request_id TEXT PRIMARY KEY REFERENCES child_requests (request_id),
    owner_run TEXT NOT NULL,
    consumed_in_run TEXT
);

CREATE INDEX IF NOT EXISTS turn_owned_requests_owner ON turn_owned_requests (owner_run);
