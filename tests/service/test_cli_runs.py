"""L5 and B2 through the command line: ``tidings status`` lists the open runs, and a run that
holds on an undecided call shows ``awaiting_approval``; once decided and done it is gone."""

from __future__ import annotations

import asyncio
import sys

from tests.conftest import Backend
from tests.scenarios.test_awaiting_approval import MODEL, PROFILE, Deploys
from tests.service.test_cli import ENV, WAIT_S, _row
from tidings.runtime.root import Runtime


async def _status(url: str, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidings", "status", "--database", url, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV)
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def _held_then_done(url: str) -> tuple[str, str, str, str]:
    deploys = Deploys()
    async with Runtime.open(url, models=[MODEL], tools=[deploys.tool()]) as rt:
        conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
        await rt.post(conv, "deploy it")
        [run] = await asyncio.wait_for(rt.settle(conv), WAIT_S)
        held = await _status(url)
        held_one = await _status(url, "--conversation", conv)
        [approval] = await rt.approvals.list(conv, status="pending")
        await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")
        assert await asyncio.wait_for(rt.settle(conv), WAIT_S) == []
        done = await _status(url)
    assert run.run_id in held_one  # the conversation's own view lists it too
    return conv, run.run_id, held, done


def test_l5_awaiting_approval_cli_status_shows_the_held_run(backend: Backend) -> None:
    conv, run_id, held, done = asyncio.run(_held_then_done(backend.url))
    assert "open runs" in held
    row = _row(held, conv)
    assert row[:3] == [conv, run_id, "awaiting_approval (see its approvals)"]
    assert row[3] == "person"
    assert "open runs" in done
    assert run_id not in done  # completed: no open run is left
