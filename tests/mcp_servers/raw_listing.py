"""A hand-written stdio MCP server (JSON-RPC lines, the 2025-11-25 handshake) whose listing
holds malformed tools, as no SDK server would serve them: ``string_schema`` (its inputSchema
is ``{"type": "string"}``) and ``no_schema`` (no inputSchema at all), beside a sound
``hello``."""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {"name": "hello", "description": "Greets someone.",
     "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}},
                     "required": ["name"]}},
    {"name": "string_schema", "description": "Its input schema is not an object's.",
     "inputSchema": {"type": "string"}},
    {"name": "no_schema", "description": "It has no input schema."},
]


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw-listing", "version": "1.0"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call" and params.get("name") == "hello":
        who = (params.get("arguments") or {}).get("name", "nobody")
        return {"content": [{"type": "text", "text": f"hello {who}"}], "isError": False}
    if method == "tools/call":
        return {"content": [{"type": "text", "text": "no such tool"}], "isError": True}
    raise LookupError(method)


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request or "method" not in request:
            continue  # a notification, or an answer to nothing this server asked
        try:
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"],
                                     "result": answer(request)}
        except LookupError:
            reply = {"jsonrpc": "2.0", "id": request["id"],
                     "error": {"code": -32601, "message": "Method not found"}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
