-- A2A push-notification configs (P1): kept per task and per principal, so that a delivery
-- worker (P3) can read them from the database alone. Additive and idempotent.

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
