-- A background task whose work runs on an MCP server (a task-augmented tool call): which
-- server, which tool, and the task id the server gave it. A runtime started after a crash
-- follows the task again by this id; a task the server no longer knows is lost.
-- Additive and idempotent.

CREATE TABLE IF NOT EXISTS mcp_tasks (
    task_id text PRIMARY KEY REFERENCES tasks (task_id),
    server text NOT NULL,
    tool text NOT NULL,
    mcp_task_id text NOT NULL
);
