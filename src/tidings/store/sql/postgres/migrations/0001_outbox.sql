-- Instances, operations and the signal outbox (SPEC S2, S3-S10).
-- Additive and idempotent: every object is created only if it is missing.

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
