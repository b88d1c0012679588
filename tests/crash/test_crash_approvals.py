"""A runtime process killed with SIGKILL while its run awaits a person's approval (L5, S9): the
next holder of the conversation recovers the run as any interrupted run -- failed
``interrupted``, its held call answered ``outcome_unknown`` -- and the call never runs, not
even if the stale approval is approved afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Backend, RuntimeFactory
from tests.crash.helpers import wait_instance_released
from tests.crash.turn_child import OWNER, crash_config, deploy_rules, deploy_tool
from tests.crash.turn_helpers import pairing_problems, spawn_turn_child
from tidings import ManualClock
from tidings.errors import ApprovalDecidedError
from tidings.types import RunStatus


async def test_l5_awaiting_approval_sigkill_recovers_the_held_run_as_interrupted(
    backend: Backend, clock: ManualClock, runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    marker = tmp_path / "deploy.calls"
    async with spawn_turn_child("approval_hang", backend.url, str(marker)) as child:
        dead = await child.checkpoint("awaiting_approval")
        await child.kill()
    assert dead["status"] == "awaiting_approval"
    await wait_instance_released(backend.url, dead["instance_id"])
    cid, run_id, call_id = dead["conversation_id"], dead["run_id"], dead["call_id"]

    rt = await runtimes(models=[deploy_rules("Hello again.")], tools=[deploy_tool(str(marker))],
                        clock=clock, config=crash_config())
    # No clock advance: the dead holder's liveness lock is free, so its slot was voided at boot.
    await rt.coordinator.sweep()
    assert await rt.settle(cid) == []  # nothing holds here: the held turn died with its process

    [run] = await rt.runs.list(cid)
    assert (run.run_id, run.status, run.failure_code) == (run_id, RunStatus.FAILED,
                                                          "interrupted")
    results = [m for m in await rt.transcript(cid) if m.tool_call_id == call_id]
    assert [m.meta.get("status") for m in results] == ["outcome_unknown"]

    # The held approval expired with its run: a late approval is refused, the call never runs.
    [approval] = await rt.approvals.list(cid)
    assert approval.status == "expired"
    with pytest.raises(ApprovalDecidedError):
        await rt.approvals.decide(cid, dead["approval_id"], approve=True, decided_by=OWNER)
    await rt.post(cid, "are you there?", owner=OWNER)
    assert await rt.settle(cid) == []
    old, new = await rt.runs.list(cid)
    assert (old.status, new.status) == (RunStatus.FAILED, RunStatus.COMPLETED)
    assert (await rt.transcript(cid))[-1].content == "Hello again."
    assert not marker.exists()
    assert pairing_problems(await rt.transcript(cid)) == []
