-- Instances, operations and the signal outbox (SPEC S2, S3-S10).
-- Additive and idempotent: every object is created only if it is missing.

CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at_us INTEGER NOT NULL,
    heartbeat_at_us INTEGER NOT NULL,
    stopped_at_us INTEGER,
    reconciled_at_us INTEGER
);

CREATE INDEX IF NOT EXISTS instances_unreconciled
    ON instances (started_at_us) WHERE reconciled_at_us IS NULL;

CREATE TABLE IF NOT EXISTS operations (
    operation_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    owner TEXT NOT NULL,
    origin_instance TEXT NOT NULL REFERENCES instances (instance_id),
    idempotency_key TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('accepted', 'completed', 'failed', 'outcome_unknown')),
    outcome TEXT,
    failure_code TEXT,
    accepted_at_us INTEGER NOT NULL,
    settled_at_us INTEGER,
    UNIQUE (owner, idempotency_key)
);

CREATE INDEX IF NOT EXISTS operations_unsettled
    ON operations (origin_instance) WHERE state = 'accepted';

CREATE TABLE IF NOT EXISTS signal_events (
    seq INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    operation_id TEXT REFERENCES operations (operation_id),
    conversation_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    payload TEXT NOT NULL,
    payload_bytes INTEGER NOT NULL,
    schema_version INTEGER NOT NULL,
    published_at_us INTEGER NOT NULL,
    UNIQUE (conversation_id, idempotency_key)
);

CREATE TABLE IF NOT EXISTS signal_queues (
    conversation_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL DEFAULT 0,
    head_seq INTEGER NOT NULL DEFAULT 0,
    backlog INTEGER NOT NULL DEFAULT 0,
    dead_letters INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS signal_deliveries (
    delivery_id INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL REFERENCES signal_events (event_id) ON DELETE CASCADE,
    conversation_id TEXT NOT NULL,
    queue_seq INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'acknowledged', 'dead_letter')),
    attempts INTEGER NOT NULL DEFAULT 0,
    claimable_at_us INTEGER NOT NULL,
    lease_token TEXT,
    lease_deadline_us INTEGER,
    lease_instance TEXT,
    lease_owner TEXT,
    payload_bytes INTEGER NOT NULL,
    failure_code TEXT,
    published_at_us INTEGER NOT NULL,
    settled_at_us INTEGER,
    UNIQUE (event_id, conversation_id)
);

CREATE INDEX IF NOT EXISTS signal_deliveries_queue
    ON signal_deliveries (conversation_id, queue_seq) WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS signal_deliveries_acknowledged
    ON signal_deliveries (settled_at_us) WHERE state = 'acknowledged';
CREATE INDEX IF NOT EXISTS signal_deliveries_dead
    ON signal_deliveries (conversation_id, delivery_id) WHERE state = 'dead_letter';

-- Every event has exactly one recipient (S11: no broadcast), so its delivery is written by the
-- engine in the same statement, numbered like the event, at the queue's freshly allocated
-- sequence (publish allocates it just before).
CREATE TRIGGER IF NOT EXISTS signal_events_deliver
AFTER INSERT ON signal_events
BEGIN
    INSERT INTO signal_deliveries (delivery_id, event_id, conversation_id, queue_seq, state,
                                   attempts, claimable_at_us, payload_bytes, published_at_us)
    VALUES (NEW.seq, NEW.event_id, NEW.conversation_id,
            (SELECT last_seq FROM signal_queues WHERE conversation_id = NEW.conversation_id),
            'ready', 0, NEW.published_at_us, NEW.payload_bytes, NEW.published_at_us);
END;
