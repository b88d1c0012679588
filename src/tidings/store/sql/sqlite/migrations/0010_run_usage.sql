-- What a run's model calls spent (B8): the calls made and their tokens, summed in the turn and
-- written with the run's end. ``input_tokens`` counts every prompt token, cached ones
-- included; the cache columns are the parts of it read from and written to the provider's
-- prompt cache. A conversation's usage is summed over its runs at read time. Additive; the
-- ledger, written in the same transaction, keeps it from running twice (SQLite has no
-- ADD COLUMN IF NOT EXISTS).

ALTER TABLE runs ADD COLUMN model_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
