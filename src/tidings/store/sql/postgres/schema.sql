-- The current schema, as the migrations build it (a test holds the two equal).

CREATE TABLE IF NOT EXISTS instances (
    instance_id text PRIMARY KEY,
    hostname text NOT NULL,
    pid integer NOT NULL,
    started_at_us bigint NOT NULL,
    heartbeat_at_us bigint NOT NULL,
    stopped_at_us bigint,
    reconciled_at_us bigint
);

CREATE INDEX IF NOT EXISTS instances_unreconciled
    ON instances (started_at_us) WHERE reconciled_at_us IS NULL;

CREATE TABLE IF NOT EXISTS operations (
    operation_id text PRIMARY KEY,
    kind text NOT NULL,
    owner text NOT NULL,
    origin_instance text NOT NULL REFERENCES instances (instance_id),
    idempotency_key text NOT NULL,
    state text NOT NULL CHECK (state IN ('accepted', 'completed', 'failed', 'outcome_unknown')),
    outcome text,
    failure_code text,
    accepted_at_us bigint NOT NULL,
    settled_at_us bigint,
    UNIQUE (owner, idempotency_key)
);

CREATE INDEX IF NOT EXISTS operations_unsettled
    ON operations (origin_instance) WHERE state = 'accepted';

CREATE TABLE IF NOT EXISTS signal_events (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    type text NOT NULL,
    operation_id text REFERENCES operations (operation_id),
    conversation_id text NOT NULL,
    idempotency_key text NOT NULL,
    payload text NOT NULL,
    payload_bytes integer NOT NULL,
    schema_version integer NOT NULL,
    published_at_us bigint NOT NULL,
    UNIQUE (conversation_id, idempotency_key)
);

CREATE TABLE IF NOT EXISTS signal_queues (
    conversation_id text PRIMARY KEY,
    last_seq bigint NOT NULL DEFAULT 0,
    head_seq bigint NOT NULL DEFAULT 0,
    backlog integer NOT NULL DEFAULT 0,
    dead_letters integer NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS signal_deliveries (
    delivery_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id text NOT NULL REFERENCES signal_events (event_id) ON DELETE CASCADE,
    conversation_id text NOT NULL,
    queue_seq bigint NOT NULL,
    state text NOT NULL CHECK (state IN ('ready', 'leased', 'acknowledged', 'dead_letter')),
    attempts integer NOT NULL DEFAULT 0,
    claimable_at_us bigint NOT NULL,
    lease_token text,
    lease_deadline_us bigint,
    lease_instance text,
    lease_owner text,
    payload_bytes integer NOT NULL,
    failure_code text,
    published_at_us bigint NOT NULL,
    settled_at_us bigint,
    UNIQUE (event_id, conversation_id)
);

CREATE INDEX IF NOT EXISTS signal_deliveries_queue
    ON signal_deliveries (conversation_id, queue_seq) WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS signal_deliveries_acknowledged
    ON signal_deliveries (settled_at_us) WHERE state = 'acknowledged';
CREATE INDEX IF NOT EXISTS signal_deliveries_dead
    ON signal_deliveries (conversation_id, delivery_id) WHERE state = 'dead_letter';

CREATE TABLE IF NOT EXISTS conversations (
    conversation_id text PRIMARY KEY,
    owner text NOT NULL,
    title text NOT NULL,
    profile text NOT NULL,
    status text NOT NULL CHECK (status IN ('active', 'archived', 'tombstoned')),
    goal_status text NOT NULL
        CHECK (goal_status IN ('none', 'active', 'paused', 'blocked', 'done')),
    goal_text text,
    suppressed integer NOT NULL DEFAULT 0,
    awaiting_person integer NOT NULL DEFAULT 0,
    queued_inputs bigint NOT NULL DEFAULT 0,
    last_queue_position bigint NOT NULL DEFAULT 0,
    last_message_seq bigint NOT NULL DEFAULT 0,
    last_event_seq bigint NOT NULL DEFAULT 0,
    history_start_seq bigint NOT NULL DEFAULT 0,
    slot_token text,
    slot_deadline_us bigint,
    slot_instance text,
    slot_run text,
    created_at_us bigint NOT NULL,
    updated_at_us bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS conversations_owner ON conversations (owner, conversation_id);
CREATE INDEX IF NOT EXISTS conversations_slot
    ON conversations (slot_deadline_us) WHERE slot_token IS NOT NULL;

CREATE TABLE IF NOT EXISTS inputs (
    input_id text PRIMARY KEY,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    queue_position bigint NOT NULL,
    origin text NOT NULL CHECK (origin IN ('person', 'agent', 'task_result', 'child')),
    kernel integer NOT NULL,
    author_kind text NOT NULL CHECK (author_kind IN ('human', 'agent')),
    author_handle text NOT NULL,
    author_display_name text NOT NULL,
    sender_conversation_id text,
    run_public_id text,
    task_key text,
    delivery_mode text NOT NULL CHECK (delivery_mode IN ('queue', 'steer')),
    content text NOT NULL,
    meta text NOT NULL,
    idempotency_key text,
    state text NOT NULL CHECK (state IN ('queued', 'materialized', 'cancelled')),
    run_id text,
    accepted_at_us bigint NOT NULL,
    materialized_at_us bigint,
    message_seq bigint,
    UNIQUE (conversation_id, queue_position),
    UNIQUE (conversation_id, idempotency_key)
);

-- The read order (M2): kernel rows first, then arrival.
CREATE INDEX IF NOT EXISTS inputs_queued
    ON inputs (conversation_id, kernel DESC, queue_position) WHERE state = 'queued';

CREATE TABLE IF NOT EXISTS runs (
    run_id text PRIMARY KEY,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    trigger text NOT NULL,
    status text NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed',
                                           'needs_attention', 'stopped')),
    model text,
    failure_code text,
    instance_id text,
    steps bigint NOT NULL DEFAULT 0,
    stop_requested integer NOT NULL DEFAULT 0,
    created_at_us bigint NOT NULL,
    started_at_us bigint,
    ended_at_us bigint
);

CREATE INDEX IF NOT EXISTS runs_conversation ON runs (conversation_id, created_at_us);

-- What a run's model calls spent, written with its end (a row only for a run that called a
-- model); input_tokens counts the cached prompt tokens too. A conversation's usage is the sum
-- of its rows.
CREATE TABLE IF NOT EXISTS run_usage (
    conversation_id text NOT NULL,
    run_id text NOT NULL REFERENCES runs (run_id),
    model_calls bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cache_read_tokens bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    PRIMARY KEY (conversation_id, run_id)
);

-- Which models a run that exhausted them asked, and why each failed (a JSON list), written
-- with its end.
CREATE TABLE IF NOT EXISTS run_failures (
    conversation_id text NOT NULL,
    run_id text NOT NULL REFERENCES runs (run_id),
    models text NOT NULL,
    PRIMARY KEY (conversation_id, run_id)
);

CREATE TABLE IF NOT EXISTS messages (
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    seq bigint NOT NULL,
    message_id text NOT NULL UNIQUE,
    run_id text,
    role text NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content text NOT NULL,
    tool_calls text,
    tool_call_id text,
    tool_name text,
    origin text,
    input_id text,
    meta text NOT NULL,
    created_at_us bigint NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);

-- An A2A task's history is its run's messages.
CREATE INDEX IF NOT EXISTS messages_run ON messages (run_id, seq);

-- One row per tool call an assistant message made; result_seq stays NULL while it is open.
-- While any call of a conversation is open, only results may be appended (strict pairing).
CREATE TABLE IF NOT EXISTS tool_calls (
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    call_seq bigint NOT NULL,
    call_id text NOT NULL,
    name text NOT NULL,
    run_id text,
    result_seq bigint,
    PRIMARY KEY (conversation_id, call_seq, call_id)
);

CREATE INDEX IF NOT EXISTS tool_calls_open
    ON tool_calls (conversation_id, call_id) WHERE result_seq IS NULL;

CREATE TABLE IF NOT EXISTS events (
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    seq bigint NOT NULL,
    type text NOT NULL,
    run_id text,
    data text NOT NULL,
    at_us bigint NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);

CREATE TABLE IF NOT EXISTS result_envelopes (
    result_id text PRIMARY KEY,
    conversation_id text NOT NULL,
    task_key text,
    run_id text,
    status text NOT NULL CHECK (status IN ('stored', 'failed')),
    failure_code text,
    size_bytes bigint NOT NULL,
    key_version integer NOT NULL,
    nonce bytea,
    ciphertext bytea,
    created_at_us bigint NOT NULL,
    expires_at_us bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS result_envelopes_conversation
    ON result_envelopes (conversation_id, created_at_us);
CREATE INDEX IF NOT EXISTS result_envelopes_expiry ON result_envelopes (expires_at_us);

-- Ciphertext does not compress: store it out of line without trying (EXTERNAL, not EXTENDED).
ALTER TABLE result_envelopes ALTER COLUMN ciphertext SET STORAGE EXTERNAL;

-- What a result's writer left out to keep it within its bound: the stream and byte span of each
-- cut, as JSON. A result with a row here is truncated, not whole.
CREATE TABLE IF NOT EXISTS result_drops (
    result_id text PRIMARY KEY,
    drops text NOT NULL,
    expires_at_us bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS result_drops_expiry ON result_drops (expires_at_us);

CREATE TABLE IF NOT EXISTS tasks (
    task_id text PRIMARY KEY,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    task_key text NOT NULL,
    run_id text,
    call_id text,
    command text NOT NULL,
    notify text NOT NULL CHECK (notify IN ('on_exit', 'never')),
    lifetime text NOT NULL CHECK (lifetime IN ('turn', 'conversation')),
    state text NOT NULL
        CHECK (state IN ('running', 'exited', 'failed', 'timed_out', 'killed', 'lost')),
    exit_code bigint,
    signal text,
    event_id text UNIQUE,
    committed integer NOT NULL DEFAULT 0,
    handed_off integer NOT NULL DEFAULT 0,
    delivered integer NOT NULL DEFAULT 0,
    consumed integer NOT NULL DEFAULT 0,
    cancelled integer NOT NULL DEFAULT 0,
    reported_in_tool_result integer NOT NULL DEFAULT 0,
    continuation_error text,
    notification_seq bigint,
    result_id text,
    stdout_bytes bigint NOT NULL DEFAULT 0,
    stderr_bytes bigint NOT NULL DEFAULT 0,
    excerpt bytea,
    excerpt_truncated integer NOT NULL DEFAULT 0,
    duration_ms bigint,
    instance_id text NOT NULL,
    started_at_us bigint NOT NULL,
    ended_at_us bigint,
    UNIQUE (conversation_id, task_key)
);

CREATE INDEX IF NOT EXISTS tasks_running ON tasks (instance_id) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS tasks_undelivered
    ON tasks (conversation_id) WHERE state <> 'running' AND delivered = 0 AND cancelled = 0;
CREATE INDEX IF NOT EXISTS tasks_unconsumed
    ON tasks (conversation_id) WHERE delivered = 1 AND consumed = 0;

-- Where a background task's process runs (T9).
CREATE TABLE IF NOT EXISTS task_processes (
    task_id text PRIMARY KEY REFERENCES tasks (task_id),
    pid bigint NOT NULL,
    host text NOT NULL,
    process_started text
);

-- A task whose work runs on an MCP server (B5): the server, the tool and the server's task id.
CREATE TABLE IF NOT EXISTS mcp_tasks (
    task_id text PRIMARY KEY REFERENCES tasks (task_id),
    server text NOT NULL,
    tool text NOT NULL,
    mcp_task_id text NOT NULL
);

-- Approvals (L5).
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
CREATE INDEX IF NOT EXISTS approvals_conversation
    ON approvals (conversation_id, requested_at_us);

-- Child conversations (M16).
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

-- A turn-owned spawn's first report settles in the run that opened it (M16).
CREATE TABLE IF NOT EXISTS turn_owned_requests (
    request_id text PRIMARY KEY REFERENCES child_requests (request_id),
    owner_run text NOT NULL,
    consumed_in_run text
);

CREATE INDEX IF NOT EXISTS turn_owned_requests_owner ON turn_owned_requests (owner_run);

-- Questions (B15): what an MCP server asks a person, held until a person decides it once.
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

-- OAuth 2.1 for MCP servers over HTTP (B18): tokens and client registration, sealed.
CREATE TABLE IF NOT EXISTS mcp_oauth (
    server text PRIMARY KEY,
    url text NOT NULL,
    tokens text,
    client_info text,
    updated_at_us bigint NOT NULL
);

-- Who was told of an MCP server's outage (B4), kept across a process's stop.
CREATE TABLE IF NOT EXISTS mcp_outage_told (
    server text NOT NULL,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    told_at_us bigint NOT NULL,
    PRIMARY KEY (server, conversation_id)
);

-- A2A push-notification configs (P1), per task (the input a message made) and principal.
CREATE TABLE IF NOT EXISTS a2a_push_configs (
    task_id text NOT NULL,
    owner text NOT NULL,
    config_id text NOT NULL,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    url text NOT NULL,
    token text NOT NULL,
    auth_scheme text NOT NULL,
    auth_credentials text NOT NULL,
    created_at_us bigint NOT NULL,
    PRIMARY KEY (task_id, owner, config_id)
);

-- Remote children (P5): child requests a remote A2A agent answers, and its task.
CREATE TABLE IF NOT EXISTS remote_children (
    request_id text PRIMARY KEY REFERENCES child_requests (request_id),
    agent text NOT NULL,
    message_id text NOT NULL UNIQUE,
    context_id text NOT NULL,
    message text NOT NULL,
    remote_task_id text,
    remote_state text,
    instance_id text NOT NULL,
    created_at_us bigint NOT NULL,
    sent_at_us bigint,
    ended_at_us bigint
);

CREATE INDEX IF NOT EXISTS remote_children_followed
    ON remote_children (instance_id) WHERE ended_at_us IS NULL;

-- The tokens remote agents push a remote child's news with (P5, migration 0021).
CREATE TABLE IF NOT EXISTS remote_child_hooks (
    request_id text PRIMARY KEY REFERENCES remote_children (request_id),
    token text NOT NULL
);

-- A2A push notifications (P3): one delivery per (journal event, config of a task it concerns),
-- written by the trigger in the unit that commits the event (see migration 0019).
CREATE INDEX IF NOT EXISTS a2a_push_configs_conversation
    ON a2a_push_configs (conversation_id);

CREATE TABLE IF NOT EXISTS a2a_push_deliveries (
    delivery_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id text NOT NULL,
    owner text NOT NULL,
    config_id text NOT NULL,
    conversation_id text NOT NULL,
    event_seq bigint NOT NULL,
    event_type text NOT NULL,
    run_id text,
    data text NOT NULL,
    state text NOT NULL CHECK (state IN ('ready', 'leased', 'delivered', 'dead_letter')),
    attempts integer NOT NULL DEFAULT 0,
    claimable_at_us bigint NOT NULL,
    lease_token text,
    lease_deadline_us bigint,
    failure_code text,
    published_at_us bigint NOT NULL,
    settled_at_us bigint,
    UNIQUE (task_id, owner, config_id, event_seq)
);

CREATE INDEX IF NOT EXISTS a2a_push_deliveries_pending
    ON a2a_push_deliveries (task_id, owner, config_id, delivery_id)
    WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_due
    ON a2a_push_deliveries (claimable_at_us) WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_dead
    ON a2a_push_deliveries (delivery_id) WHERE state = 'dead_letter';

CREATE OR REPLACE FUNCTION a2a_push_publish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.conversation_id = NEW.conversation_id)
    THEN RETURN NULL
    ; END IF
    ; INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                     event_type, run_id, data, state, attempts,
                                     claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NEW.run_id,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c LEFT JOIN inputs i ON i.input_id = c.task_id
     WHERE c.conversation_id = NEW.conversation_id
       AND ((NEW.run_id IS NOT NULL AND i.run_id = NEW.run_id)
            OR c.task_id IN (SELECT jsonb_array_elements_text(
                                 CASE WHEN jsonb_typeof(NEW.data::jsonb -> 'inputs') = 'array'
                                      THEN NEW.data::jsonb -> 'inputs' ELSE '[]' END))
            OR c.task_id IN (SELECT jsonb_array_elements_text(
                                 CASE WHEN jsonb_typeof(NEW.data::jsonb -> 'input_ids') = 'array'
                                      THEN NEW.data::jsonb -> 'input_ids' ELSE '[]' END)))
    ON CONFLICT DO NOTHING
    ; RETURN NULL
; END $$;

CREATE OR REPLACE TRIGGER a2a_push_publish
    AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type IN ('turn_status', 'question_asked', 'input_cancelled'))
    EXECUTE FUNCTION a2a_push_publish();

-- A2A later answers (P2): a kernel mail input after the run it answers ended is a new task;
-- the configs of that run's tasks are copied to it and announce it (see migration 0020).
-- A conversation no config watches skips both queries (migration 0024).
CREATE OR REPLACE FUNCTION a2a_push_later_answer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.conversation_id = NEW.conversation_id)
    THEN RETURN NULL
    ; END IF
    ; INSERT INTO a2a_push_configs (task_id, owner, config_id, conversation_id, url, token,
                                  auth_scheme, auth_credentials, created_at_us)
    SELECT NEW.data::jsonb ->> 'input_id', c.owner, c.config_id, c.conversation_id,
           c.url, c.token, c.auth_scheme, c.auth_credentials, NEW.at_us
      FROM a2a_push_configs c JOIN inputs i ON i.input_id = c.task_id
      JOIN runs r ON r.run_id = i.run_id
     WHERE c.conversation_id = NEW.conversation_id
       AND r.status NOT IN ('queued', 'running')
       AND r.run_id IN (
           SELECT t.run_id FROM inputs m
             JOIN tasks t ON t.conversation_id = m.conversation_id AND t.task_key = m.task_key
            WHERE m.input_id = NEW.data::jsonb ->> 'input_id'
           UNION
           SELECT q.run_public_id FROM inputs m
             JOIN child_requests q ON q.parent_conversation_id = m.conversation_id
                                  AND q.task_key = m.task_key
            WHERE m.input_id = NEW.data::jsonb ->> 'input_id')
    ON CONFLICT DO NOTHING
    ; INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                       event_type, run_id, data, state, attempts,
                                       claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NULL,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c
     WHERE c.conversation_id = NEW.conversation_id
       AND c.task_id = NEW.data::jsonb ->> 'input_id'
    ON CONFLICT DO NOTHING
    ; RETURN NULL
; END $$;

CREATE OR REPLACE TRIGGER a2a_push_later_answer
    AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type = 'input_accepted'
          AND (NEW.data::jsonb ->> 'origin') IN ('task_result', 'child'))
    EXECUTE FUNCTION a2a_push_later_answer();
