-- What a run's model calls spent (B8): the calls made and their tokens, summed in the turn and
-- written with the run's end. ``input_tokens`` counts every prompt token, cached ones
-- included; the cache columns are the parts of it read from and written to the provider's
-- prompt cache. A conversation's usage is summed over its runs at read time. Additive and
-- idempotent.

ALTER TABLE runs ADD COLUMN IF NOT EXISTS model_calls bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cache_read_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cache_write_tokens bigint NOT NULL DEFAULT 0;
