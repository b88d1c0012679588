"""The command line (A3). The only package where ``asyncio.run`` appears.

- ``tidings serve`` (:mod:`~tidings.cli.serve`): the HTTP service over a runtime (SQLite file
  by default).
- ``tidings post`` / ``tidings watch`` (:mod:`~tidings.cli.client`): a client of a running
  service.
- ``tidings create`` / ``tidings transcript`` (:mod:`~tidings.cli.conversation`) and
  ``tidings chat`` (:mod:`~tidings.cli.chat`): a conversation over a service (``--url``) or the
  database itself (``--database``); both ways are :mod:`~tidings.cli.sessions`, shown one way by
  :mod:`~tidings.cli.render`.
- ``tidings questions`` / ``tidings answer`` (:mod:`~tidings.cli.questions`): what MCP servers
  asked a conversation's people, and a person's answer, over a service.
- ``tidings approvals`` / ``tidings approve`` / ``tidings deny`` (:mod:`~tidings.cli.approvals`):
  the tool calls held for a person's approval, and a person's decision, over a service.
- ``tidings status`` / ``tidings dead-letters`` (:mod:`~tidings.cli.inspect`): read a database
  directly (read only: no instance is registered, nothing is reconciled).
- ``tidings demo`` (:mod:`~tidings.cli.demo`): the whole mission, offline, as a timeline ending
  in checks.
- ``tidings mcp login`` (:mod:`~tidings.cli.mcp`): authorize tidings, once, for an MCP server
  behind OAuth; its tokens are kept sealed in the database.

Errors a user can act on are one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

# Importing a command's module adds the command to the group.
from tidings.cli import (
    approvals,
    chat,
    client,
    conversation,
    demo,
    inspect,
    mcp,
    questions,
    serve,
)
from tidings.cli.app import main

__all__ = ("approvals", "chat", "client", "conversation", "demo", "inspect", "main", "mcp",
           "questions", "serve")
