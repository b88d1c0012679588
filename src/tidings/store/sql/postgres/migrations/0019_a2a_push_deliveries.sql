-- A2A push notifications (P3): one delivery per (journal event, config of a task it concerns),
-- written by the engine in the unit that commits the event -- the run's status change itself
-- -- so publication commits or rolls back with the state it announces. The kernel's writers
-- know nothing of this: the trigger reads the journal's own rows (a ``turn_status`` names its
-- run, whose inputs are the tasks; a run's first status names them in ``inputs``; a
-- cancellation in ``input_ids``). A worker POSTs them, in order per config, at least once.
-- Additive and idempotent. (The function's inner statements end mid-line: the migration
-- runner splits on a semicolon that ends a line.)

CREATE INDEX IF NOT EXISTS a2a_push_configs_conversation
    ON a2a_push_configs (conversation_id);

CREATE TABLE IF NOT EXISTS a2a_push_deliveries (
    delivery_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id text NOT NULL,
    owner text NOT NULL,
    config_id text NOT NULL,
    conversation_id text NOT NULL,
    event_seq bigint NOT NULL,
    event_type text NOT NULL,
    run_id text,
    data text NOT NULL,
    state text NOT NULL CHECK (state IN ('ready', 'leased', 'delivered', 'dead_letter')),
    attempts integer NOT NULL DEFAULT 0,
    claimable_at_us bigint NOT NULL,
    lease_token text,
    lease_deadline_us bigint,
    failure_code text,
    published_at_us bigint NOT NULL,
    settled_at_us bigint,
    UNIQUE (task_id, owner, config_id, event_seq)
);

CREATE INDEX IF NOT EXISTS a2a_push_deliveries_pending
    ON a2a_push_deliveries (task_id, owner, config_id, delivery_id)
    WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_due
    ON a2a_push_deliveries (claimable_at_us) WHERE state IN ('ready', 'leased');
CREATE INDEX IF NOT EXISTS a2a_push_deliveries_dead
    ON a2a_push_deliveries (delivery_id) WHERE state = 'dead_letter';

CREATE OR REPLACE FUNCTION a2a_push_publish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                     event_type, run_id, data, state, attempts,
                                     claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NEW.run_id,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c LEFT JOIN inputs i ON i.input_id = c.task_id
     WHERE c.conversation_id = NEW.conversation_id
       AND ((NEW.run_id IS NOT NULL AND i.run_id = NEW.run_id)
            OR c.task_id IN (SELECT jsonb_array_elements_text(
                                 CASE WHEN jsonb_typeof(NEW.data::jsonb -> 'inputs') = 'array'
                                      THEN NEW.data::jsonb -> 'inputs' ELSE '[]' END))
            OR c.task_id IN (SELECT jsonb_array_elements_text(
                                 CASE WHEN jsonb_typeof(NEW.data::jsonb -> 'input_ids') = 'array'
                                      THEN NEW.data::jsonb -> 'input_ids' ELSE '[]' END)))
    ON CONFLICT DO NOTHING
    ; RETURN NULL
; END $$;

CREATE OR REPLACE TRIGGER a2a_push_publish
    AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type IN ('turn_status', 'question_asked', 'input_cancelled'))
    EXECUTE FUNCTION a2a_push_publish();
