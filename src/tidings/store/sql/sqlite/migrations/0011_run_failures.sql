-- Which models a run that exhausted them asked, and why each failed (B7): one JSON list per
-- run that ended failed or needing attention after a model failure, written with its end
-- (model, reason, kind, status, error_class, message, attempts). A table of its own, as for a
-- run's usage. Additive and idempotent.

CREATE TABLE IF NOT EXISTS run_failures (
    conversation_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    models TEXT NOT NULL,
    PRIMARY KEY (conversation_id, run_id)
);
