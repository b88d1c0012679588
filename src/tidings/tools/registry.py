"""The tool registry: what a profile may offer the model, and how a call is executed.

A tool's handler gets the call's context and its arguments and returns text (or a
:class:`ToolOutput`). A handler that raises gives the model an error result -- a tool's
failure is information for the model, not a failure of the turn. A turn that is stopped while
a handler runs cancels the handler and records a ``cancelled`` result.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from tidings.errors import InvalidInputError
from tidings.models.base import ModelReply, ModelRequest, ToolSpec
from tidings.tasks.service import StartedTask
from tidings.tasks.spawn import ProcessSpec
from tidings.types import ToolContext as CallIds

TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}(\.[A-Za-z0-9_-]{1,64})?")
"""What a tool's name may be; an MCP server's tools are named ``server.tool``."""

TOOL_RESULT_LIMIT = 64 * 1024
"""The most bytes (UTF-8) of a tool's result the model reads; a turn cuts a longer one and
says where and how much. Tools that page (results, task output) size their pages to fit."""


class TaskStarter(Protocol):
    """Starts a background task for a tool call (the runtime's background tasks)."""

    async def start(
        self, context: CallIds, spec: ProcessSpec, *, lifetime: str = "conversation"
    ) -> StartedTask: ...


Sampler = Callable[[ModelRequest], Awaitable[ModelReply]]
"""Asks the calling conversation's models (in the profile's order), its spend counted on the
run: how a tool has the conversation's model answer something (an MCP server's sampling)."""


@dataclass(frozen=True, slots=True)
class ToolContext(CallIds):
    """Who is calling a tool (the conversation, the run, the model's call id) and, in a turn, a
    way to start a background task for the call (:meth:`start_task`)."""

    tasks: TaskStarter | None = field(default=None, compare=False, repr=False)
    started: list[str] = field(default_factory=list, compare=False, repr=False)
    """The key of the task this call started, if any: the call's result carries it."""
    background: bool = False
    """The profile asks for this call in the background (its ``background`` list): a tool that
    can run as a background task does (an MCP server's tool, when the server runs tasks)."""
    sample: Sampler | None = field(default=None, compare=False, repr=False)
    """The conversation's models, asked by the tool during its call (in a turn)."""

    async def start_task(
        self, command: str | Sequence[str], *, lifetime: str = "conversation",
        timeout_s: float = 600.0,
    ) -> str:
        """Start ``command`` (a shell command line, or an argv list run without a shell) as a
        background task of this call, and return its task key. Its end comes back to the
        conversation as a notice (``lifetime="conversation"``), or before this turn's reply is
        final (``"turn"``). One task per call; killed after ``timeout_s`` seconds."""
        if self.tasks is None:
            raise InvalidInputError("background tasks start only in a turn of a runtime")
        if self.started:
            raise InvalidInputError(f"this call started task {self.started[0]} already: "
                                    "a tool call starts one background task at most")
        if not timeout_s > 0:
            raise InvalidInputError("timeout_s must be more than 0")
        timeout = timedelta(seconds=timeout_s)
        spec = (ProcessSpec(command=command, shell=True, timeout=timeout)
                if isinstance(command, str) else ProcessSpec(argv=tuple(command), timeout=timeout))
        started = await self.tasks.start(self, spec, lifetime=lifetime)
        self.started.append(started.task_key)
        return started.task_key


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result as the model will read it."""

    content: str
    is_error: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)
    whole: str | None = field(default=None, repr=False)
    """The whole result, when ``content`` is only its head (it passed
    :data:`TOOL_RESULT_LIMIT`): the turn keeps it as a result envelope the model can page."""


ToolHandler = Callable[[ToolContext, Mapping[str, Any]], Awaitable["str | ToolOutput"]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A named tool; ``read_only`` tools are the ones automatic turns may use (L4)."""

    name: str
    description: str
    handler: ToolHandler
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    read_only: bool = False
    needs_approval: bool = False
    """Every call waits for a person's decision, whatever the profile's approval mode (L5)."""

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


class ToolRegistry:
    """Tools by name. A profile names the tools it offers; unknown names are offered nothing."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if TOOL_NAME.fullmatch(tool.name) is None:
            raise InvalidInputError(f"tool name {tool.name!r} is not a valid identifier")
        if tool.name in self._tools:
            raise InvalidInputError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def offered(self, names: Iterable[str]) -> tuple[Tool, ...]:
        """The registered tools among ``names``, in the profile's order."""
        return tuple(t for n in names if (t := self._tools.get(n)) is not None)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)
