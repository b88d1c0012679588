-- The task journal (SPEC T2): background tasks, their terminal state and stable event id, and
-- the flags their notification depends on. Additive and idempotent.

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
