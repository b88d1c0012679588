-- Result envelopes (SPEC R1-R4): background output, encrypted at rest, owner-scoped, bounded,
-- purged after their deadline. The key is never here: only the nonce and the ciphertext.

CREATE TABLE IF NOT EXISTS result_envelopes (
    result_id text PRIMARY KEY,
    conversation_id text NOT NULL,
    task_key text,
    run_id text,
    status text NOT NULL CHECK (status IN ('stored', 'failed')),
    failure_code text,
    size_bytes bigint NOT NULL,
    key_version integer NOT NULL,
    nonce bytea,
    ciphertext bytea,
    created_at_us bigint NOT NULL,
    expires_at_us bigint NOT NULL
);

CREATE INDEX IF NOT EXISTS result_envelopes_conversation
    ON result_envelopes (conversation_id, created_at_us);
CREATE INDEX IF NOT EXISTS result_envelopes_expiry ON result_envelopes (expires_at_us);

-- Ciphertext does not compress: store it out of line without trying (EXTERNAL, not EXTENDED).
ALTER TABLE result_envelopes ALTER COLUMN ciphertext SET STORAGE EXTERNAL;
