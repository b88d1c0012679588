"""Running one tool call of a turn: a tool's failure is its result, never the turn's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

from tidings.errors import TidingsError
from tidings.models.base import ToolCall
from tidings.tools.registry import TOOL_RESULT_LIMIT, TaskStarter, Tool, ToolContext, ToolOutput
from tidings.tracing import Tracing
from tidings.turns import spans
from tidings.turns.plan import TurnPlan

log = logging.getLogger("tidings.turns")


async def execute(
    plan: TurnPlan, offered: Sequence[Tool], call: ToolCall, tracing: Tracing,
    tasks: TaskStarter | None = None,
) -> ToolOutput:
    """Run ``call`` on the tool offered under its name; an error, or a result past
    ``TOOL_RESULT_LIMIT`` bytes (cut, and said so), is what the model reads. The call is a
    span, current while the tool runs: what the tool starts (a background task) is its child.
    ``tasks`` is how the tool's context starts a background task."""
    with spans.tool_call(tracing, plan, call) as span:
        context = ToolContext(plan.conversation_id, plan.run_id, call.call_id, tasks=tasks,
                              background=call.name in plan.profile.background)
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
    encoded = output.content.encode("utf-8", "replace")
    if len(encoded) > TOOL_RESULT_LIMIT:
        text = encoded[:TOOL_RESULT_LIMIT].decode("utf-8", "ignore")
        cut = len(encoded) - len(text.encode("utf-8"))
        output = replace(output, content=(
            f"{text}\n[truncated at {TOOL_RESULT_LIMIT} bytes: the last {cut:,} of "
            f"{len(encoded):,} bytes of this result were cut]"))
    return output


__all__ = ("execute",)
