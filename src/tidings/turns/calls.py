"""Running one tool call of a turn: a tool's failure is its result, never the turn's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

from tidings.errors import TidingsError
from tidings.models.base import ToolCall
from tidings.support.tracing import Tracing
from tidings.tools.registry import (
    TOOL_RESULT_LIMIT,
    Sampler,
    TaskStarter,
    Tool,
    ToolContext,
    ToolOutput,
)
from tidings.turns import spans
from tidings.turns.plan import TurnPlan

log = logging.getLogger("tidings.turns")


async def execute(
    plan: TurnPlan, offered: Sequence[Tool], call: ToolCall, tracing: Tracing,
    tasks: TaskStarter | None = None, sample: Sampler | None = None,
) -> ToolOutput:
    """Run ``call`` on the tool offered under its name; an error, or a result past
    ``TOOL_RESULT_LIMIT`` bytes (cut, and said so), is what the model reads. The call is a
    span, current while the tool runs: what the tool starts (a background task) is its child.
    ``tasks`` is how the tool's context starts a background task, ``sample`` how it asks the
    conversation's models."""
    with spans.tool_call(tracing, plan, call) as span:
        context = ToolContext(plan.conversation_id, plan.run_id, call.call_id, tasks=tasks,
                              background=call.name in plan.profile.background, sample=sample)
        output = await _run(offered, call, context)
        if context.started and "task_key" not in output.meta:
            # The result that commits names the task, as the shell tool's does: the turn
            # marks it committed (and waits for it if it is the turn's).
            output = replace(output, meta={**output.meta, "task_key": context.started[0]})
        spans.tool_ended(span, output)
        return output


async def _run(offered: Sequence[Tool], call: ToolCall, context: ToolContext) -> ToolOutput:
    tool = next((t for t in offered if t.name == call.name), None)
    if tool is None:
        return ToolOutput(f"error: no tool named {call.name!r} is available", is_error=True)
    try:
        result = await tool.handler(context, call.arguments)
    except asyncio.CancelledError:
        raise
    except TidingsError as exc:
        return ToolOutput(f"error ({exc.code}): {exc.message}", is_error=True)
    except Exception as exc:
        log.info("tool %s failed: %r", call.name, exc)
        return ToolOutput(f"error: {type(exc).__name__}: {exc}", is_error=True)
    output = result if isinstance(result, ToolOutput) else ToolOutput(str(result))
    if len(output.content.encode("utf-8", "replace")) > TOOL_RESULT_LIMIT:
        # The head now; the turn keeps the whole as a result envelope (or says what is cut).
        output = replace(output, content=head(output.content), whole=output.content)
    return output


def head(text: str) -> str:
    """The first :data:`TOOL_RESULT_LIMIT` bytes of ``text`` (whole characters)."""
    return text.encode("utf-8", "replace")[:TOOL_RESULT_LIMIT].decode("utf-8", "ignore")


def kept(output: ToolOutput, result_id: str | None) -> ToolOutput:
    """A result past the cut as the model reads it: its head, and where the rest is -- the
    result envelope ``result_id`` (paged by ``tool_result_get``) -- or that it was cut."""
    if output.whole is None:
        return output
    size = len(output.whole.encode("utf-8", "replace"))
    text = head(output.whole)
    shown = len(text.encode("utf-8"))
    if result_id is None:
        note = (f"[truncated at {TOOL_RESULT_LIMIT} bytes: the last {size - shown:,} of "
                f"{size:,} bytes of this result were cut]")
    else:
        note = (f"[cut at {TOOL_RESULT_LIMIT} bytes: the whole result ({size:,} bytes) is kept "
                f"as {result_id}; read the rest with tool_result_get, result_id {result_id}, "
                f"offset {shown}]")
    meta = {k: v for k, v in output.meta.items() if k != "kept_result_id"}
    if result_id is not None:
        meta["kept_result_id"] = result_id
    # ``whole`` stays: a unit that is tried again seals it again, under a new id.
    return replace(output, content=f"{text}\n{note}", meta=meta)


__all__ = ("execute", "head", "kept")
