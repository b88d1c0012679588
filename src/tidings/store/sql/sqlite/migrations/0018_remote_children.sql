-- Remote children (P5): a child request answered by a remote A2A agent instead of a local
-- conversation. The message id and context id are chosen before the brief is sent, so a brief
-- whose answer a crash lost is found again by its context, never sent twice; the remote task
-- id is stored once the agent answered; ended_at_us marks a task followed to its end (or
-- cancelled). The instance follows it until it ends; a live one adopts it from a gone one.
-- Additive and idempotent.

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
