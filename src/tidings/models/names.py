"""Tool names as the providers take them.

tidings names an MCP server's tools ``server.tool``; OpenAI and Anthropic accept only letters,
digits, ``_`` and ``-`` in a tool's name. An adapter sends each dot as ``__`` and reads the
names in the reply back through the names it offered, so the rest of tidings only ever sees
its own names.
"""

from __future__ import annotations

from dataclasses import replace

from tidings.errors import ModelError, ModelErrorKind
from tidings.models.base import ModelReply, ModelRequest, PromptMessage, ToolCall

DOT = "__"
"""What a dot in a tool's name is sent as."""


def wire_name(name: str) -> str:
    return name.replace(".", DOT)


class ToolNames:
    """The names one request offers, sent in the providers' alphabet and read back."""

    def __init__(self, request: ModelRequest, *, model: str) -> None:
        self._local: dict[str, str] = {}
        for spec in request.tools:
            wire = wire_name(spec.name)
            if self._local.setdefault(wire, spec.name) != spec.name:
                raise ModelError(
                    ModelErrorKind.PERMANENT,
                    f"tools {self._local[wire]!r} and {spec.name!r} are both sent as {wire!r}",
                    model=model,
                )
        self.changed = any(wire != local for wire, local in self._local.items())

    def request(self, request: ModelRequest) -> ModelRequest:
        """``request`` with every tool name (offered, called, answered) as it is sent."""
        if not self.changed:
            return request
        return replace(
            request,
            tools=tuple(replace(s, name=wire_name(s.name)) for s in request.tools),
            messages=tuple(_message(m) for m in request.messages),
        )

    def reply(self, reply: ModelReply) -> ModelReply:
        """``reply`` with the names it called read back to tidings' own."""
        if not self.changed or not reply.tool_calls:
            return reply
        return replace(reply, tool_calls=tuple(
            replace(c, name=self._local.get(c.name, c.name)) for c in reply.tool_calls))


def _message(message: PromptMessage) -> PromptMessage:
    if not message.tool_calls and message.tool_name is None:
        return message
    return replace(
        message,
        tool_calls=tuple(ToolCall(c.call_id, wire_name(c.name), c.arguments)
                         for c in message.tool_calls),
        tool_name=None if message.tool_name is None else wire_name(message.tool_name),
    )


__all__ = ("DOT", "ToolNames", "wire_name")
