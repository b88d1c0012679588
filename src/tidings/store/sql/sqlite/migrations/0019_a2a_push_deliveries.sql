-- A2A push notifications (P3): one delivery per (journal event, config of a task it concerns),
-- written by the engine in the unit that commits the event -- the run's status change itself
-- -- so publication commits or rolls back with the state it announces. The kernel's writers
-- know nothing of this: the trigger reads the journal's own rows (a ``turn_status`` names its
-- run, whose inputs are the tasks; a run's first status names them in ``inputs``; a
-- cancellation in ``input_ids``). A worker POSTs them, in order per config, at least once.
-- Additive and idempotent.

CREATE INDEX IF NOT EXISTS a2a_push_configs_conversation
    ON a2a_push_configs (conversation_id);

CREATE TABLE IF NOT EXISTS a2a_push_deliveries (
    delivery_id INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    config_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    run_id TEXT,
    data TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'delivered', 'dead_letter')),
    attempts INTEGER NOT NULL DEFAULT 0,
    claimable_at_us INTEGER NOT NULL,
    lease_token TEXT,
    lease_deadline_us INTEGER,
    failure_code TEXT,
    published_at_us INTEGER NOT NULL,
    settled_at_us INTEGER,
    UNIQUE (task_id, owner, config_id, event_seq)
);

CREATE INDEX IF NOT EXISTS a2a_push_deliveries_pending
    ON a2a_push_deliveries (task_id, owner, config_id, delivery_id)
    WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_due
    ON a2a_push_deliveries (claimable_at_us) WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_dead
    ON a2a_push_deliveries (delivery_id) WHERE state = 'dead_letter';

CREATE TRIGGER IF NOT EXISTS a2a_push_publish
AFTER INSERT ON events
WHEN NEW.type IN ('turn_status', 'question_asked', 'input_cancelled')
BEGIN
    INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                     event_type, run_id, data, state, attempts,
                                     claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NEW.run_id,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c LEFT JOIN inputs i ON i.input_id = c.task_id
     WHERE c.conversation_id = NEW.conversation_id
       AND ((NEW.run_id IS NOT NULL AND i.run_id = NEW.run_id)
            OR c.task_id IN (SELECT value FROM json_each(NEW.data, '$.inputs'))
            OR c.task_id IN (SELECT value FROM json_each(NEW.data, '$.input_ids')))
    ON CONFLICT DO NOTHING;
END;
