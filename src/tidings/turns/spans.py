"""The spans of a turn: the turn, each model call, each tool call
(see :mod:`tidings.support.tracing`).

A turn's span is the root of a trace of its own: a turn is started by the coordinator for
whatever asked for it (a person, a wake-up, the mail), and the context of the task that asks
is no parent of it. Its model calls and tool calls are its children; a background task a tool
call starts is a child of that tool call. Attribute names follow OpenTelemetry's generative-AI
conventions where one fits (``gen_ai.*``); the rest are ``tidings.*``.
"""

from __future__ import annotations

from tidings.models.base import ModelReply, ModelRequest, ToolCall
from tidings.support.tracing import CONVERSATION_ID, NO_SCOPE, RUN_ID, Span, SpanScope, Tracing
from tidings.tools.registry import ToolOutput
from tidings.turns.plan import TurnPlan
from tidings.types import Run, RunStatus

_FAILED = (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION)


def turn(tracing: Tracing, plan: TurnPlan) -> SpanScope:
    """The span of one turn, current while it runs."""
    if not tracing.enabled:
        return NO_SCOPE
    return tracing.span("tidings.turn", {
        CONVERSATION_ID: plan.conversation_id,
        RUN_ID: plan.run_id,
        "tidings.turn.trigger": plan.trigger.value,
        "tidings.profile.model": plan.profile.model,
    }, root=True)


def turn_ended(span: Span, run: Run) -> None:
    """The run's final status; a failed run (or one that needs attention) is an error."""
    if not span.traced:
        return
    span.set({"tidings.run.status": run.status.value, "tidings.run.steps": run.steps,
              "tidings.run.failure_code": run.failure_code, "tidings.run.model": run.model})
    if run.status in _FAILED:
        span.fail(run.failure_code or run.status.value, error_type=run.status.value)


def model_call(
    tracing: Tracing, parent: Span, request: ModelRequest, *, model: str, attempt: int
) -> SpanScope:
    """The span of one call of ``model`` (each attempt is one), a child of its turn."""
    if not tracing.enabled:
        return NO_SCOPE
    return tracing.span(f"chat {model}", {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": request.max_output_tokens,
        "tidings.model.attempt": attempt,
    }, parent=parent, kind="CLIENT")


def model_replied(span: Span, reply: ModelReply) -> None:
    if not span.traced:
        return
    span.set({
        "gen_ai.response.model": reply.model or None,
        "gen_ai.response.finish_reasons": (
            (reply.stop_reason,) if reply.stop_reason is not None else None
        ),
        "gen_ai.usage.input_tokens": reply.input_tokens,
        "gen_ai.usage.output_tokens": reply.output_tokens,
        "tidings.model.tool_calls": len(reply.tool_calls),
    })


def tool_call(tracing: Tracing, plan: TurnPlan, call: ToolCall) -> SpanScope:
    """The span of one tool call, current while the tool runs (what it starts is its child)."""
    if not tracing.enabled:
        return NO_SCOPE
    return tracing.span(f"execute_tool {call.name}", {
        CONVERSATION_ID: plan.conversation_id,
        RUN_ID: plan.run_id,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.call_id,
    })


def tool_ended(span: Span, output: ToolOutput) -> None:
    """A result the model reads as an error is the tool call's failure (its first
    characters are the span's description)."""
    if not span.traced:
        return
    task_key = output.meta.get("task_key")
    span.set({"tidings.task_key": task_key if isinstance(task_key, str) else None})
    if output.is_error:
        span.fail(output.content, error_type="tool_error")


__all__ = ("model_call", "model_replied", "tool_call", "tool_ended", "turn", "turn_ended")
