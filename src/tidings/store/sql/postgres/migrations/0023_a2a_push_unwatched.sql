-- A2A push notifications: a conversation that no push config watches (nearly all of them) skips
-- the announcement's query at once. The trigger fires for every turn's status events; its
-- query joined the configs to the inputs and took the event's data apart as JSON to find that
-- no config wanted it. Additive and idempotent. (The function's inner statements end
-- mid-line: the migration runner splits on a semicolon that ends a line.)

CREATE OR REPLACE FUNCTION a2a_push_publish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.conversation_id = NEW.conversation_id)
    THEN RETURN NULL
    ; END IF
    ; INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
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
