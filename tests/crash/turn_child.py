"""The child process of the runtime crash tests: ``turn_child.py MODE URL [ARGS...]``.

Each mode opens a real :class:`~tidings.runtime.root.Runtime` on the database at URL and announces
checkpoints on stdout as JSON lines ``{"checkpoint": ..., ...}``; the parent kills it with
SIGKILL at the instant it cares about (no ``close()``, no ``finally``).

- ``serve URL``: a runtime on the system clock serving whatever the parent asks it to post.
  It reads commands from stdin, one JSON line each: ``{"post": FILE, "batch": NAME}`` posts the
  person inputs listed in FILE (``[[conversation_id, content], ...]``) and announces ``posted``;
  ``{"exit": true}`` (or end of input) closes the runtime cleanly and announces ``closed``.
  Inputs whose text contains ``slow`` make the model take ``SLOW_SECONDS``.
- ``tool_hang URL MARKER``: one conversation whose turn calls the tool ``hang``; the tool
  appends a line to MARKER, announces ``tool_running`` and never returns.
- ``model_hang URL``: one conversation holding a published signal and a person's input; the
  turn that takes both blocks in the model, and ``model_blocked`` is announced from there.
- ``approval_hang URL MARKER``: one conversation whose turn calls ``deploy``, a tool that needs
  a person's approval; once the run holds on it, ``awaiting_approval`` is announced. The tool
  appends a line to MARKER if it ever runs.

The crash modes run on a StillClock: a ManualClock that starts where the parent's does, so
slot deadlines agree between the processes (the parent moves its own clock past them), while
this process's heartbeat, sweeps and keeper run on real time as they would in production.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from tidings import (
    CoordinatorConfig,
    ManualClock,
    ModelReply,
    ModelRequest,
    Profile,
    Rule,
    Runtime,
    RuntimeConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    TurnConfig,
)
from tidings.clock import SystemClock
from tidings.models.base import DeltaCallback

BLOCK_SECONDS = 120  # a safety net: a child whose parent vanished does not linger forever
SLOW_SECONDS = 1.0
# A live server keeps its slots by extending them every third of this; the survivor takes a
# killed server's slots from its freed liveness mark, not from their expiry. Two seconds let a
# loaded machine (one keeper's extension late by 1.3 s) expire a live turn's slot, which the
# server's own sweep then recovered as a dead holder's: a run of the survivor ended interrupted.
SERVE_SLOT_TTL = timedelta(seconds=8)
class StillClock(ManualClock):
    """Its time stands still unless moved; its sleeps and timed waits take real time."""

    async def sleep(self, seconds: float) -> None:
        await SystemClock().sleep(seconds)

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        return await SystemClock().wait(event, seconds)


CRASH_SLOT_TTL = timedelta(seconds=1)
OWNER = "alice"
HANG_PROMPT = "run the hanging tool"
SIGNAL_TYPE = "task.exited"


def announce(checkpoint: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"checkpoint": checkpoint, **fields}) + "\n")
    sys.stdout.flush()


def crash_config() -> RuntimeConfig:
    return RuntimeConfig(
        turns=TurnConfig(slot_ttl=CRASH_SLOT_TTL, retry_base=timedelta(0)),
    )


def hang_rules(default_text: str) -> ScriptedModel:
    """The model of the tool crash test: the prompt calls ``hang``; anything else is answered."""
    return ScriptedModel(
        rules=[Rule(when={"text_equals": HANG_PROMPT}, reply={"tool_calls": [{"name": "hang"}]})],
        default={"text": default_text},
    )


def append_line(path: str, line: str) -> None:
    """Append one line and make it durable before the caller goes on (a tool's side effect)."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{line}\n")
        out.flush()
        os.fsync(out.fileno())


def read_batch(path: str) -> list[tuple[str, str]]:
    return [(cid, content) for cid, content in json.loads(Path(path).read_text("utf-8"))]


async def block() -> None:
    await asyncio.sleep(BLOCK_SECONDS)
    raise SystemExit("the parent never killed this child")


# -- serve ------------------------------------------------------------------------------------


async def serve(url: str) -> None:
    model = ScriptedModel(
        rules=[Rule(when={"text_contains": "slow"},
                    reply={"text": "ok", "delay_seconds": SLOW_SECONDS})],
        default={"text": "ok", "delay_seconds": 0.02},
    )
    config = RuntimeConfig(
        turns=TurnConfig(slot_ttl=SERVE_SLOT_TTL, retry_base=timedelta(0)),
        coordinator=CoordinatorConfig(sweep_interval=timedelta(milliseconds=500)),
    )
    async with Runtime.open(url, models=[model], config=config) as rt:
        announce("ready", instance_id=rt.instance_id, pid=os.getpid())
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:
                break
            command = json.loads(line)
            if command.get("exit"):
                break
            batch = read_batch(command["post"])
            for conversation_id, content in batch:
                await rt.post(conversation_id, content, owner=OWNER)
            announce("posted", batch=command["batch"], count=len(batch))
    announce("closed")


# -- tool_hang --------------------------------------------------------------------------------


async def tool_hang(url: str, marker: str) -> None:
    running = asyncio.Event()
    seen: dict[str, str] = {}

    async def hang(ctx: ToolContext, args: Mapping[str, Any]) -> str:
        append_line(marker, ctx.call_id)
        seen.update(run_id=ctx.run_id, call_id=ctx.call_id)
        running.set()
        await asyncio.sleep(BLOCK_SECONDS)  # the "external tool" is running when we die
        return "finished (the parent never killed this child)"

    async with Runtime.open(
        url, models=[hang_rules("never asked")],
        tools=[Tool("hang", "Runs until the process dies.", hang)],
        clock=StillClock(), config=crash_config(),
    ) as rt:
        conversation = await rt.create_conversation(
            OWNER, Profile(model="scripted", tools=("hang",))
        )
        accepted = await rt.post(conversation.conversation_id, HANG_PROMPT, owner=OWNER)
        await asyncio.wait_for(running.wait(), 30)
        announce(
            "tool_running", instance_id=rt.instance_id,
            conversation_id=conversation.conversation_id, input_id=accepted.input_id, **seen,
        )
        await block()


# -- model_hang -------------------------------------------------------------------------------


class BlockingModel:
    """Remembers the request it was sent, tells the process, then never answers."""

    name = "scripted"

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.request: ModelRequest | None = None

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.request = request
        self.called.set()
        await asyncio.sleep(BLOCK_SECONDS)
        raise SystemExit("the parent never killed this child")


async def model_hang(url: str) -> None:
    model = BlockingModel()
    async with Runtime.open(
        url, models=[model], clock=StillClock(), config=crash_config()
    ) as rt:
        conversation = await rt.create_conversation(OWNER, Profile(model="scripted"))
        cid = conversation.conversation_id
        # Suppress automatic continuation first, so the signal's wake-up starts no turn of its
        # own and the person's turn below takes the input and the signal together.
        await rt.stop(cid, owner=OWNER)
        published = await rt.store.transact(
            lambda tx: rt.outbox.publish(
                tx, cid, SIGNAL_TYPE, {"task_key": "t1", "exit_code": 0},
                idempotency_key="exit-t1",
            ),
            route=cid,
        )
        accepted = await rt.post(cid, "What did the background task do?", owner=OWNER)
        await asyncio.wait_for(model.called.wait(), 30)
        assert model.request is not None
        announce(
            "model_blocked", instance_id=rt.instance_id, conversation_id=cid,
            input_id=accepted.input_id, event_id=published.event_id,
            delivery_id=published.delivery_id,
            suffix=list(model.request.suffix),
            messages=[m.content for m in model.request.messages],
        )
        await block()


# -- approval_hang ----------------------------------------------------------------------------


DEPLOY_PROMPT = "deploy to production"


def deploy_tool(marker: str) -> Tool:
    """A tool that needs a person's approval; it records every run of it in ``marker``."""

    async def deploy(ctx: ToolContext, args: Mapping[str, Any]) -> str:
        append_line(marker, ctx.call_id)
        return "deployed"

    return Tool("deploy", "Deploy (needs approval).", deploy, needs_approval=True)


def deploy_rules(default_text: str) -> ScriptedModel:
    return ScriptedModel(
        rules=[Rule(when={"text_equals": DEPLOY_PROMPT},
                    reply={"tool_calls": [{"name": "deploy"}]})],
        default={"text": default_text},
    )


async def approval_hang(url: str, marker: str) -> None:
    async with Runtime.open(
        url, models=[deploy_rules("never asked")], tools=[deploy_tool(marker)],
        clock=StillClock(), config=crash_config(),
    ) as rt:
        conversation = await rt.create_conversation(
            OWNER, Profile(model="scripted", tools=("deploy",))
        )
        cid = conversation.conversation_id
        await rt.post(cid, DEPLOY_PROMPT, owner=OWNER)
        [run] = await asyncio.wait_for(rt.settle(cid), 30)  # ends on the hold
        [approval] = await rt.approvals.list(cid, status="pending")
        announce(
            "awaiting_approval", instance_id=rt.instance_id, conversation_id=cid,
            run_id=run.run_id, status=run.status.value, approval_id=approval.approval_id,
            call_id=approval.call_id,
        )
        await block()


def main() -> None:
    mode, url, *args = sys.argv[1:]
    if mode == "serve":
        asyncio.run(serve(url))
    elif mode == "tool_hang":
        asyncio.run(tool_hang(url, args[0]))
    elif mode == "model_hang":
        asyncio.run(model_hang(url))
    elif mode == "approval_hang":
        asyncio.run(approval_hang(url, args[0]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
