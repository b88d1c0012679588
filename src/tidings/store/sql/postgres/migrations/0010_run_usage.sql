-- What a run's model calls spent (B8): the calls made and their tokens, summed in the turn and
-- written with the run's end (a row only for a run that called a model; none reads as zero).
-- input_tokens counts every prompt token, cached ones included; the cache columns are the
-- parts of it read from and written to the provider's prompt cache. Keyed by conversation
-- first: a conversation's usage is the sum of its rows, read at read time. A table of its own,
-- as on SQLite (which cannot add a column idempotently). Additive and idempotent.

CREATE TABLE IF NOT EXISTS run_usage (
    conversation_id text NOT NULL,
    run_id text NOT NULL REFERENCES runs (run_id),
    model_calls bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cache_read_tokens bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    PRIMARY KEY (conversation_id, run_id)
);
