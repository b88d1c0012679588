-- The task journal (SPEC T2): background tasks, their terminal state and stable event id, and
-- the flags their notification depends on. Additive and idempotent.

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
