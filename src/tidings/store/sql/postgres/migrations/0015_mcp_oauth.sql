-- OAuth 2.1 for MCP servers over HTTP (B18): each declared server's tokens and dynamic client
-- registration, sealed under the master key (never stored in the clear). Additive and idempotent.

CREATE TABLE IF NOT EXISTS mcp_oauth (
    server text PRIMARY KEY,
    url text NOT NULL,
    tokens text,
    client_info text,
    updated_at_us bigint NOT NULL
);
