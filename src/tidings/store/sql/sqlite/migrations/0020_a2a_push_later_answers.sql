-- A2A later answers (P2): a background task's notice or a child's reply that enters a
-- conversation after the run that started the work has ended is a new A2A task (its input).
-- In the unit that accepts it, the push configs of the task whose work it answers (an input
-- read by that run) are copied to it, and its announcement -- its id, context and state
-- (submitted) -- is published to them; its runs then announce its progress like any task's.
-- Additive and idempotent.

CREATE TRIGGER IF NOT EXISTS a2a_push_later_answer
AFTER INSERT ON events
WHEN NEW.type = 'input_accepted'
     AND json_extract(NEW.data, '$.origin') IN ('task_result', 'child')
BEGIN
    INSERT INTO a2a_push_configs (task_id, owner, config_id, conversation_id, url, token,
                                  auth_scheme, auth_credentials, created_at_us)
    SELECT json_extract(NEW.data, '$.input_id'), c.owner, c.config_id, c.conversation_id,
           c.url, c.token, c.auth_scheme, c.auth_credentials, NEW.at_us
      FROM a2a_push_configs c JOIN inputs i ON i.input_id = c.task_id
      JOIN runs r ON r.run_id = i.run_id
     WHERE c.conversation_id = NEW.conversation_id
       AND r.status NOT IN ('queued', 'running')
       AND r.run_id IN (
           SELECT t.run_id FROM inputs m
             JOIN tasks t ON t.conversation_id = m.conversation_id AND t.task_key = m.task_key
            WHERE m.input_id = json_extract(NEW.data, '$.input_id')
           UNION
           SELECT q.run_public_id FROM inputs m
             JOIN child_requests q ON q.parent_conversation_id = m.conversation_id
                                  AND q.task_key = m.task_key
            WHERE m.input_id = json_extract(NEW.data, '$.input_id'))
    ON CONFLICT DO NOTHING;
    INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
                                     event_type, run_id, data, state, attempts,
                                     claimable_at_us, published_at_us)
    SELECT c.task_id, c.owner, c.config_id, NEW.conversation_id, NEW.seq, NEW.type, NULL,
           NEW.data, 'ready', 0, NEW.at_us, NEW.at_us
      FROM a2a_push_configs c
     WHERE c.conversation_id = NEW.conversation_id
       AND c.task_id = json_extract(NEW.data, '$.input_id')
    ON CONFLICT DO NOTHING;
END;
