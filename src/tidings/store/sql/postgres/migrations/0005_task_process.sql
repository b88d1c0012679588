-- Where a background task's process runs (T9): so that, once its instance is gone, the process
-- it left behind can be found and stopped -- on the same host, if it is still that process.
-- Additive and idempotent.

CREATE TABLE IF NOT EXISTS task_processes (
    task_id text PRIMARY KEY REFERENCES tasks (task_id),
    pid bigint NOT NULL,
    host text NOT NULL,
    process_started text
);
