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

-- An A2A task's history is its run's messages.
CREATE INDEX IF NOT EXISTS messages_run ON messages (run_id, seq);

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

-- Questions (B15): what an MCP server asks a person, held until a person decides it once.
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

-- OAuth 2.1 for MCP servers over HTTP (B18): tokens and client registration, sealed.
CREATE TABLE IF NOT EXISTS mcp_oauth (
    server TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    tokens TEXT,
    client_info TEXT,
    updated_at_us INTEGER NOT NULL
);

-- Who was told of an MCP server's outage (B4), kept across a process's stop.
CREATE TABLE IF NOT EXISTS mcp_outage_told (
    server TEXT NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    told_at_us INTEGER NOT NULL,
    PRIMARY KEY (server, conversation_id)
);

-- A2A push-notification configs (P1), per task (the input a message made) and principal.
CREATE TABLE IF NOT EXISTS a2a_push_configs (
    task_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    config_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    url TEXT NOT NULL,
    token TEXT NOT NULL,
    auth_scheme TEXT NOT NULL,
    auth_credentials TEXT NOT NULL,
    created_at_us INTEGER NOT NULL,
    PRIMARY KEY (task_id, owner, config_id)
);

-- Remote children (P5): child requests a remote A2A agent answers, and its task.
CREATE TABLE IF NOT EXISTS remote_children (
    request_id TEXT PRIMARY KEY REFERENCES child_requests (request_id),
    agent TEXT NOT NULL,
    message_id TEXT NOT NULL UNIQUE,
    context_id TEXT NOT NULL,
    message TEXT NOT NULL,
    remote_task_id TEXT,
    remote_state TEXT,
    instance_id TEXT NOT NULL,
    created_at_us INTEGER NOT NULL,
    sent_at_us INTEGER,
    ended_at_us INTEGER
);

CREATE INDEX IF NOT EXISTS remote_children_followed
    ON remote_children (instance_id) WHERE ended_at_us IS NULL;

-- The tokens remote agents push a remote child's news with (P5, migration 0021).
CREATE TABLE IF NOT EXISTS remote_child_hooks (
    request_id TEXT PRIMARY KEY REFERENCES remote_children (request_id),
    token TEXT NOT NULL
);

-- A2A push notifications (P3): one delivery per (journal event, config of a task it concerns),
-- written by the trigger in the unit that commits the event (see migration 0019).
CREATE INDEX IF NOT EXISTS a2a_push_configs_conversation
    ON a2a_push_configs (conversation_id);

CREATE TABLE IF NOT EXISTS a2a_push_deliveries (
    delivery_id INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    config_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    run_id TEXT,
    data TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'delivered', 'dead_letter')),
    attempts INTEGER NOT NULL DEFAULT 0,
    claimable_at_us INTEGER NOT NULL,
    lease_token TEXT,
    lease_deadline_us INTEGER,
    failure_code TEXT,
    published_at_us INTEGER NOT NULL,
    settled_at_us INTEGER,
    UNIQUE (task_id, owner, config_id, event_seq)
);

CREATE INDEX IF NOT EXISTS a2a_push_deliveries_pending
    ON a2a_push_deliveries (task_id, owner, config_id, delivery_id)
    WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_due
    ON a2a_push_deliveries (claimable_at_us) WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_dead
    ON a2a_push_deliveries (delivery_id) WHERE state = 'dead_letter';

CREATE TRIGGER IF NOT EXISTS a2a_push_publish
AFTER INSERT ON events
WHEN NEW.type IN ('turn_status', 'question_asked', 'input_cancelled')
BEGIN
    INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                     event_type, run_id, data, state, attempts,
                                     claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NEW.run_id,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c LEFT JOIN inputs i ON i.input_id = c.task_id
     WHERE c.conversation_id = NEW.conversation_id
       AND ((NEW.run_id IS NOT NULL AND i.run_id = NEW.run_id)
            OR c.task_id IN (SELECT value FROM json_each(NEW.data, '$.inputs'))
            OR c.task_id IN (SELECT value FROM json_each(NEW.data, '$.input_ids')))
    ON CONFLICT DO NOTHING;
END;

-- A2A later answers (P2): a kernel mail input after the run it answers ended is a new task;
-- the configs of that run's tasks are copied to it and announce it (see migration 0020).
CREATE TRIGGER IF NOT EXISTS a2a_push_later_answer
AFTER INSERT ON events
WHEN NEW.type = 'input_accepted'
     AND json_extract(NEW.data, '$.origin') IN ('task_result', 'child')
BEGIN
    INSERT INTO a2a_push_configs (task_id, owner, config_id, conversation_id, url, token,
                                  auth_scheme, auth_credentials, created_at_us)
    SELECT json_extract(NEW.data, '$.input_id'), c.owner, c.config_id, c.conversation_id,
           c.url, c.token, c.auth_scheme, c.auth_credentials, NEW.at_us
      FROM a2a_push_configs c JOIN inputs i ON i.input_id = c.task_id
      JOIN runs r ON r.run_id = i.run_id
     WHERE c.conversation_id = NEW.conversation_id
       AND r.status NOT IN ('queued', 'running')
       AND r.run_id IN (
           SELECT t.run_id FROM inputs m
             JOIN tasks t ON t.conversation_id = m.conversation_id AND t.task_key = m.task_key
            WHERE m.input_id = json_extract(NEW.data, '$.input_id')
           UNION
           SELECT q.run_public_id FROM inputs m
             JOIN child_requests q ON q.parent_conversation_id = m.conversation_id
                                  AND q.task_key = m.task_key
            WHERE m.input_id = json_extract(NEW.data, '$.input_id'))
    ON CONFLICT DO NOTHING;
    INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                     event_type, run_id, data, state, attempts,
                                     claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NULL,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c
     WHERE c.conversation_id = NEW.conversation_id
       AND c.task_id = json_extract(NEW.data, '$.input_id')
    ON CONFLICT DO NOTHING;
END;
