-- Remote children's push hints (P5): where the remote agent is told to push a task's news,
-- tidings checks this token (X-A2A-Notification-Token) before it asks the agent at once. The
-- token lets its holder only hasten a question tidings asks anyway (the polling stays the
-- rule): it is kept as it was sent. A request with no push asked for has no row. Additive and
-- idempotent.

CREATE TABLE IF NOT EXISTS remote_child_hooks (
    request_id text PRIMARY KEY REFERENCES remote_children (request_id),
    token text NOT NULL
);
