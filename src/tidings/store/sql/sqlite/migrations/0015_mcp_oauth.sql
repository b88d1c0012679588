-- OAuth 2.1 for MCP servers over HTTP (B18): each declared server's tokens and dynamic client
-- registration, sealed under the master key (never stored in the clear). Additive and idempotent.

CREATE TABLE IF NOT EXISTS mcp_oauth (
    server TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    tokens TEXT,
    client_info TEXT,
    updated_at_us INTEGER NOT NULL
);
