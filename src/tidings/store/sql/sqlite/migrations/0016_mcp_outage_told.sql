-- Who was told of an MCP server's outage (B4), kept across a process's stop: the process that
-- connects again tells each of them the server is back. Additive and idempotent.

CREATE TABLE IF NOT EXISTS mcp_outage_told (
    server TEXT NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
    told_at_us INTEGER NOT NULL,
    PRIMARY KEY (server, conversation_id)
);
