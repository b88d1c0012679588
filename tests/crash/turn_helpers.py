"""Helpers for the runtime crash tests: a child runtime process, a recording model, checks.

``spawn_turn_child`` starts ``tests/crash/turn_child.py`` the way ``helpers.spawn`` starts
``child.py`` -- stdout announces JSON checkpoints, the child is SIGKILLed and reaped on exit,
whatever happened -- and also keeps a pipe to the child's stdin, so a long-lived child (a
runtime serving conversations) can be told to do more work between checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from tests.crash.helpers import Child
from tidings import Message, ModelReply, ModelRequest, ScriptedModel
from tidings.models.base import DeltaCallback

TURN_CHILD_SCRIPT = Path(__file__).with_name("turn_child.py")


class TurnChild(Child):
    """A child runtime process: checkpoints on stdout, commands (JSON lines) on stdin."""

    async def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode("utf-8"))
        await self.proc.stdin.drain()


@contextlib.asynccontextmanager
async def spawn_turn_child(mode: str, url: str, *args: str) -> AsyncIterator[TurnChild]:
    """Start ``turn_child.py mode url args...``; SIGKILL and reap it on exit, whatever happened."""
    fd, name = tempfile.mkstemp(prefix="tidings-turn-child-", suffix=".stderr")
    stderr_path = Path(name)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(TURN_CHILD_SCRIPT), mode, url, *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=fd,
        )
    finally:
        os.close(fd)
    child = TurnChild(proc, stderr_path)
    try:
        yield child
    finally:
        await child.kill()
        if proc.stdin is not None:
            proc.stdin.close()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await proc.stdin.wait_closed()
        if proc.stdout is not None:
            # Drain what is left so the pipe transport is closed cleanly.
            await proc.stdout.read()
        child.forget()


class RecordingModel:
    """A scripted model that keeps every request it was sent (to look at the suffix)."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.requests: list[ModelRequest] = []

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.requests.append(request)
        return await self.inner.complete(request, on_delta=on_delta)


def pairing_problems(messages: Sequence[Message]) -> list[str]:
    """Where the transcript breaks strict pairing: every tool call answered exactly once, by a
    tool result that comes after it and before any other user or assistant message."""
    problems: list[str] = []
    open_calls: set[str] = set()
    answered: set[str] = set()
    for m in sorted(messages, key=lambda m: m.seq):
        if m.role == "tool":
            if m.tool_call_id in answered:
                problems.append(f"seq {m.seq}: call {m.tool_call_id} answered twice")
            elif m.tool_call_id not in open_calls:
                problems.append(f"seq {m.seq}: result for {m.tool_call_id}, which is not open")
            else:
                open_calls.discard(m.tool_call_id)
                answered.add(m.tool_call_id)
            continue
        if open_calls:
            problems.append(f"seq {m.seq}: {m.role} message while {sorted(open_calls)} open")
        if m.role == "assistant":
            open_calls.update(str(call["call_id"]) for call in m.tool_calls)
    if open_calls:
        problems.append(f"calls never answered: {sorted(open_calls)}")
    return problems


def overlapping_runs(runs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """Pairs of runs of one conversation whose [started_at_us, ended_at_us] overlap.

    A run still open counts as lasting forever; runs that touch (one ends when the next
    starts, as in the unit that recovers a dead holder's slot) do not overlap.
    """
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_conversation.setdefault(str(run["conversation_id"]), []).append(run)
    overlaps: list[tuple[str, str]] = []
    forever = sys.maxsize
    for held in by_conversation.values():
        held.sort(key=lambda r: (r["started_at_us"], r["run_id"]))
        for i, a in enumerate(held):
            a_end = a["ended_at_us"] if a["ended_at_us"] is not None else forever
            for b in held[i + 1:]:
                if b["started_at_us"] >= a_end:
                    break
                overlaps.append((str(a["run_id"]), str(b["run_id"])))
    return overlaps
