-- A2A later answers: a conversation that no push config watches (nearly all of them) skips the
-- later answer's two queries at once. The trigger fires for every task's notification and every
-- child's reply; its queries joined the configs to the inputs, the tasks and the child requests
-- to find that no config wanted it (about 100 us of the server's time per notification, twice
-- that after the backend was idle). Additive and idempotent. (The function's inner statements
-- end mid-line: the migration runner splits on a semicolon that ends a line.)

CREATE OR REPLACE FUNCTION a2a_push_later_answer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.conversation_id = NEW.conversation_id)
    THEN RETURN NULL
    ; END IF
    ; INSERT INTO a2a_push_configs (task_id, owner, config_id, conversation_id, url, token,
                                  auth_scheme, auth_credentials, created_at_us)
    SELECT NEW.data::jsonb ->> 'input_id', c.owner, c.config_id, c.conversation_id,
           c.url, c.token, c.auth_scheme, c.auth_credentials, NEW.at_us
      FROM a2a_push_configs c JOIN inputs i ON i.input_id = c.task_id
      JOIN runs r ON r.run_id = i.run_id
     WHERE c.conversation_id = NEW.conversation_id
       AND r.status NOT IN ('queued', 'running')
       AND r.run_id IN (
           SELECT t.run_id FROM inputs m
             JOIN tasks t ON t.conversation_id = m.conversation_id AND t.task_key = m.task_key
            WHERE m.input_id = NEW.data::jsonb ->> 'input_id'
           UNION
           SELECT q.run_public_id FROM inputs m
             JOIN child_requests q ON q.parent_conversation_id = m.conversation_id
                                  AND q.task_key = m.task_key
            WHERE m.input_id = NEW.data::jsonb ->> 'input_id')
    ON CONFLICT DO NOTHING
    ; INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                       event_type, run_id, data, state, attempts,
                                       claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NULL,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c
     WHERE c.conversation_id = NEW.conversation_id
       AND c.task_id = NEW.data::jsonb ->> 'input_id'
    ON CONFLICT DO NOTHING
    ; RETURN NULL
; END $$;
