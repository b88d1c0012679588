-- A2A push-notification configs (P1): kept per task and per principal, so that a delivery
-- worker (P3) can read them from the database alone. Additive and idempotent.

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
