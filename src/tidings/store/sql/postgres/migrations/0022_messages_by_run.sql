-- A run's messages by the run: an A2A task's history is its run's messages, read without
-- passing over the rest of a long conversation. Additive and idempotent.

CREATE INDEX IF NOT EXISTS messages_run ON messages (run_id, seq);
