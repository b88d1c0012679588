-- Who was told of an MCP server's outage (B4), kept across a process's stop: the process that
-- connects again tells each of them the server is back. Additive and idempotent.

CREATE TABLE IF NOT EXISTS mcp_outage_told (
    server text NOT NULL,
    conversation_id text NOT NULL REFERENCES conversations (conversation_id),
    told_at_us bigint NOT NULL,
    PRIMARY KEY (server, conversation_id)
);
