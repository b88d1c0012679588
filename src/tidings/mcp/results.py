"""What the model reads of an MCP tool call: its result, or a typed error.

Text content is joined; when a result carries no text, its structured content is the JSON
the model reads (the structured content is kept in the result's meta either way); images,
audio and resources are described in a line each, never inlined. A result the server marks
``isError`` is a tool error. What goes wrong around the call (the server is not connected,
the connection broke, the call took too long) is a typed error the model can read::

    {"error": "mcp_unavailable", "server": "weather", "tool": "forecast", "reason": "..."}
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from tidings.mcp.reports import PROTOCOL, TIMEOUT, UNAVAILABLE
from tidings.tools.registry import TOOL_RESULT_LIMIT, ToolOutput

_NOTE_ROOM = 256
"""Bytes of the bound left for the note on a cut result (it takes less than 160)."""


def tool_output(server: str, tool: str, result: CallToolResult, *,
                limit_bytes: int | None = None) -> ToolOutput:
    """The model's reading of a completed call. Past ``limit_bytes`` (UTF-8), the rest of the
    text is dropped, and the result says how much (``meta["dropped_bytes"]`` too)."""
    lines = [_describe(block) for block in result.content]
    text = "\n".join(line for line in lines if line)
    meta: dict[str, Any] = {"mcp_server": server, "mcp_tool": tool}
    if result.structured_content is not None:
        # Encoded only when it is what the model reads, or small enough to keep in the meta
        # (a 2 MiB copy of the text took ~8 ms to encode only to be measured).
        small = _at_least(result.structured_content, TOOL_RESULT_LIMIT) < TOOL_RESULT_LIMIT
        if not text or small:
            structured = json.dumps(result.structured_content, ensure_ascii=False, default=str)
            text = text or structured
            small = len(structured.encode("utf-8")) <= TOOL_RESULT_LIMIT
        if small:
            # Larger, the message would hold what the cut keeps out of it: the text (which is
            # the structured content, or says it) is kept whole as a result envelope instead.
            meta["structured"] = result.structured_content
    encoded = text.encode("utf-8")
    if limit_bytes is not None and len(encoded) > limit_bytes:
        # What is kept, with the note that says what was dropped, stays within the bound:
        # it is then kept whole (as a result envelope), never refused as too large.
        kept = encoded[:limit_bytes - _NOTE_ROOM].decode("utf-8", "ignore")
        dropped = len(encoded) - len(kept.encode("utf-8"))
        meta["dropped_bytes"] = dropped
        text = (f"{kept}\n[the server's result was {len(encoded):,} bytes: the last "
                f"{dropped:,}, past the {limit_bytes:,} bytes a result keeps, were dropped]")
    return ToolOutput(text, is_error=bool(result.is_error), meta=meta)


def _at_least(value: Any, enough: int) -> int:
    """A lower bound of ``value``'s size as JSON (its strings' lengths), counted no further
    than ``enough``."""
    seen, stack = 0, [value]
    while stack and seen < enough:
        item = stack.pop()
        if isinstance(item, str):
            seen += len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return seen


def failure(kind: str, server: str, tool: str, reason: str, **extra: Any) -> ToolOutput:
    """A typed error: what went wrong around the call, as JSON the model reads."""
    body: dict[str, Any] = {"error": kind, "server": server, "tool": tool, "reason": reason}
    body.update(extra)
    return ToolOutput(json.dumps(body, ensure_ascii=False), is_error=True,
                      meta={"mcp_server": server, "mcp_tool": tool, "error": kind,
                            "reason": reason})


def _describe(block: object) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent):
        return f"[image: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, AudioContent):
        return f"[audio: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}{f' ({block.name})' if block.name else ''}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return resource.text
        return (f"[resource: {resource.uri}, {resource.mime_type or 'binary'}, "
                f"{_decoded_size(resource.blob)} bytes]")
    return f"[{type(block).__name__}]"


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


__all__ = ("PROTOCOL", "TIMEOUT", "UNAVAILABLE", "failure", "tool_output")
