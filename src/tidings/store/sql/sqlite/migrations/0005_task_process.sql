-- Where a background task's process runs (T9): so that, once its instance is gone, the process
-- it left behind can be found and stopped -- on the same host, if it is still that process.
-- Additive and idempotent.

CREATE TABLE IF NOT EXISTS task_processes (
    task_id TEXT PRIMARY KEY REFERENCES tasks (task_id),
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    process_started TEXT
);
