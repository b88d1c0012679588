-- Result envelopes (SPEC R1-R4): background output, encrypted at rest, owner-scoped, bounded,
-- purged after their deadline. The key is never here: only the nonce and the ciphertext.

CREATE TABLE IF NOT EXISTS result_envelopes (
    result_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    task_key TEXT,
    run_id TEXT,
    status TEXT NOT NULL CHECK (status IN ('stored', 'failed')),
    failure_code TEXT,
    size_bytes INTEGER NOT NULL,
    key_version INTEGER NOT NULL,
    nonce BLOB,
    ciphertext BLOB,
    created_at_us INTEGER NOT NULL,
    expires_at_us INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS result_envelopes_conversation
    ON result_envelopes (conversation_id, created_at_us);
CREATE INDEX IF NOT EXISTS result_envelopes_expiry ON result_envelopes (expires_at_us);
