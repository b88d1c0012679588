"""Quick recovery (H2, S9, C9): an instance known to be gone -- its liveness lock is free -- has
its conversation slots and leases voided at once, not when they expire; while its lock is held,
expiry stays the rule.

The first test is the user's view: ``tidings serve`` is killed with SIGKILL while a turn runs a
tool, started again on the same database, and a new input posted over HTTP is answered within
two seconds of the post (the slot the dead turn held would have blocked it for its whole lease,
30 s by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Backend, RuntimeFactory
from tests.crash.helpers import count_rows, wait_instance_released
from tests.crash.turn_child import (
    CRASH_SLOT_TTL,
    OWNER,
    append_line,
    crash_config,
    hang_rules,
)
from tests.crash.turn_helpers import RecordingModel, spawn_turn_child
from tests.service.test_cli import WAIT_S, Served, open_conversation
from tests.waiting import eventually, eventually_sync, wait_until_sync
from tidings import ManualClock, ModelReply, ModelRequest, Profile, Tool, ToolContext
from tidings.models.base import DeltaCallback
from tidings.records.outbox import OutboxConfig
from tidings.runtime.root import RuntimeConfig

RECOVERY_BOUND_S = 2.0
"""The issue's own requirement: after a restart, new input is answered within 2 s of its post."""

TOKEN = "tok-a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLOW_PROMPT = "run the slow tool"


def _rules(pidfile: Path) -> dict[str, Any]:
    # A foreground shell tool that records its pid and sleeps: the turn is mid-tool when the
    # server dies. (The process outlives the server -- it has its own session -- so the test
    # kills it when it is done.)
    return {
        "rules": [
            {"when": {"text_equals": SLOW_PROMPT},
             "reply": {"tool_calls": [{"name": "shell", "arguments": {
                 "command": f"echo $$ > {pidfile}; exec sleep 60", "timeout_s": 120}}]}},
            {"when": {"tool_result": "shell"}, "reply": {"text": "the slow tool finished"}},
        ],
        "default": {"echo": True},
    }


def _get(url: str, path: str) -> Any:
    response = httpx.get(f"{url}{path}", headers=AUTH, timeout=WAIT_S)
    assert response.status_code == 200, response.text
    return response.json()


def _answers(url: str, conversation: str) -> list[str]:
    items = _get(url, f"/v1/conversations/{conversation}/transcript")["items"]
    return [m["content"] for m in items if m["role"] == "assistant" and m["content"]]


def _post(url: str, conversation: str, content: str) -> None:
    response = httpx.post(f"{url}/v1/conversations/{conversation}/inputs",
                          json={"content": content}, headers=AUTH, timeout=WAIT_S)
    assert response.status_code == 202, response.text


def _kill_pid_in(pidfile: Path) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(pidfile.read_text("utf-8").strip()), signal.SIGKILL)


def test_h2_serve_killed_mid_turn_answers_new_input_within_2s_after_restart(
    backend: Backend, tmp_path: Path
) -> None:
    pidfile = tmp_path / "tool.pid"
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(_rules(pidfile)), "utf-8")
    args = ("--token", f"alice={TOKEN}", "--model", f"scripted:{rules}")
    first = Served(backend.url, *args)
    second: Served | None = None
    try:
        first.wait_ready()
        conversation = open_conversation(first.url, TOKEN, "shell")
        _post(first.url, conversation, SLOW_PROMPT)
        wait_until_sync(lambda: pidfile.exists() and pidfile.read_text("utf-8").strip(),
                        what="the slow tool started", within_s=WAIT_S)
        [dead] = _get(first.url, f"/v1/conversations/{conversation}/runs")["items"]
        assert dead["status"] == "running"

        first.kill()  # SIGKILL, mid-tool: the turn's slot lease has most of its 30 s left
        assert count_rows(backend.url, "conversations",
                          f"slot_run = '{dead['run_id']}'") == 1

        second = Served(backend.url, *args).wait_ready()
        posted = time.monotonic()
        _post(second.url, conversation, "hello after the crash")
        eventually_sync(lambda: _answers(second.url, conversation),
                        lambda answers: "hello after the crash" in answers,
                        what="an answer to the input posted after the crash", within_s=WAIT_S)
        took = time.monotonic() - posted
        assert took < RECOVERY_BOUND_S, f"answered {took:.2f} s after the post"

        # The dead turn was closed, not replayed: its tool call is answered outcome_unknown and
        # the tool ran once.
        runs = {r["run_id"]: r for r in _get(second.url,
                                             f"/v1/conversations/{conversation}/runs")["items"]}
        assert (runs[dead["run_id"]]["status"], runs[dead["run_id"]]["failure_code"]) == (
            "failed", "interrupted")
        items = _get(second.url, f"/v1/conversations/{conversation}/transcript")["items"]
        results = [m for m in items if m["role"] == "tool"]
        assert [m["meta"].get("status") for m in results] == ["outcome_unknown"]
        assert "the slow tool finished" not in _answers(second.url, conversation)
        assert second.stop() == 0
    finally:
        first.kill()
        if second is not None:
            second.kill()
        _kill_pid_in(pidfile)


async def test_h2_running_peer_takes_a_killed_holders_slot_at_once(
    backend: Backend, clock: ManualClock, runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    """A peer that was running when the holder died (a cluster on PostgreSQL; two processes
    on one SQLite file) recovers the slot in its periodic sweep, not at the lease's expiry:
    the manual clock moves one sweep interval at a time here, and the slot was recovered long
    before its lease would have expired."""
    marker = tmp_path / "hang.calls"
    fast = timedelta(milliseconds=50)
    config = RuntimeConfig(
        turns=crash_config().turns,
        outbox=OutboxConfig(heartbeat_interval=fast, sweep_interval=fast),
    )

    async def hang_again(ctx: ToolContext, args: Any) -> str:
        append_line(str(marker), f"{ctx.call_id} (run again)")
        return "ran"

    model = RecordingModel(hang_rules("I cannot tell whether the tool took effect."))
    peer = await runtimes(
        models=[model], tools=[Tool("hang", "Runs until the process dies.", hang_again)],
        clock=clock, config=config,
    )
    async with spawn_turn_child("tool_hang", backend.url, str(marker)) as child:
        dead = await child.checkpoint("tool_running")
        cid = dead["conversation_id"]
        # Alive (its lock held): its slot and its run stand, whatever the peer's sweeps see.
        report = await peer.instance.reconcile()
        assert (report.gone_instances, report.slots_voided) == ((), ())
        assert await peer.coordinator.sweep() == 0
        await child.kill()
    await wait_instance_released(backend.url, dead["instance_id"])

    moved = timedelta(0)

    async def closed() -> bool:
        nonlocal moved
        if count_rows(backend.url, "runs",
                      f"run_id = '{dead['run_id']}' AND failure_code = 'interrupted'") == 1:
            return True
        clock.advance(fast)  # the peer's next heartbeat and sweep are due
        moved += fast
        return False

    await eventually(closed, what="the peer closed the dead turn", within_s=WAIT_S,
                     poll_s=0.1)
    assert moved < CRASH_SLOT_TTL  # the sweep, not the lease's expiry
    await peer.post(cid, "Did it work?", owner=OWNER)
    await peer.settle(cid)
    transcript = await peer.transcript(cid)
    assert transcript[-1].content == "I cannot tell whether the tool took effect."
    results = [m for m in transcript if m.tool_call_id == dead["call_id"]]
    assert [m.meta.get("status") for m in results] == ["outcome_unknown"]
    assert marker.read_text("utf-8").splitlines() == [dead["call_id"]]  # never run again


class HeldModel:
    """Answers only once released: the turn that asks holds its slot until then."""

    name = "scripted"

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.asked.set()
        await self.release.wait()
        return ModelReply(text="done", tool_calls=(), model=request.model,
                          stop_reason="end_turn")


async def test_h2_held_liveness_lock_keeps_a_live_peers_slot_until_expiry(
    backend: Backend, clock: ManualClock, runtimes: RuntimeFactory
) -> None:
    """A peer whose liveness lock is held is never known to be gone: even once its heartbeat
    is older than the instance timeout (it is declared gone, and its delivery leases voided),
    the slot of the turn it may still be running stays until the slot's own deadline."""
    model = HeldModel()
    holder = await runtimes(models=[model], clock=clock, config=crash_config())
    short = RuntimeConfig(
        turns=crash_config().turns,
        outbox=OutboxConfig(instance_timeout=timedelta(milliseconds=200)),
    )
    other = await runtimes(models={"scripted": model}, clock=clock, config=short)
    cid = (await holder.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
    await holder.post(cid, "think", owner=OWNER)
    await asyncio.wait_for(model.asked.wait(), WAIT_S)

    report = await other.instance.reconcile()
    assert (report.gone_instances, report.slots_voided) == ((), ())

    clock.advance(timedelta(milliseconds=500))  # silent past the timeout; the slot is not due
    report = await other.instance.reconcile()
    assert report.gone_instances == (holder.instance_id,)
    assert report.slots_voided == ()
    assert await other.coordinator.sweep() == 0
    [run] = await other.runs.list(cid)
    assert run.status == "running"
    assert count_rows(backend.url, "conversations",
                      f"slot_run = '{run.run_id}' AND slot_deadline_us > {clock.now_us()}") == 1

    model.release.set()
    await holder.settle(cid)
