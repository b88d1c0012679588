"""The demo's process restarts: a child process runs a runtime until it dies or restarts.

The child (``python -m tidings demo-child URL CONVERSATION``) opens a runtime on the demo's
database, takes the person's request to deploy, lets the model start ``sleep 30`` in the
background, then either reports and waits to be killed (``--crash``: the parent SIGKILLs it, no
shutdown code runs) or asks for an authorized restart (L2) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tidings.demo.script import (
    DEPLOY_COMMAND,
    MODEL,
    PRODUCTION_REQUEST,
    STAGING_REQUEST,
    demo_config,
)
from tidings.errors import TidingsError
from tidings.runtime.root import Runtime

RESTART_REASON = "demo restart"
CRASH_WAIT_S = 120.0


async def restart_child(
    url: str, conversation_id: str, *, crash: bool, report: Callable[[Mapping[str, Any]], None]
) -> None:
    """Run in the child process. ``report`` is called once with what the parent needs."""
    async with Runtime.open(url, models=[MODEL], config=demo_config()) as rt:
        request = await rt.post(conversation_id, STAGING_REQUEST if crash else PRODUCTION_REQUEST)
        await rt.settle(conversation_id)
        deploy = next(t for t in await rt.tasks.list(conversation_id)
                      if t.command == DEPLOY_COMMAND and t.state.value == "running")
        facts: dict[str, Any] = {
            "instance_id": rt.instance_id, "pid": os.getpid(), "task_key": deploy.task_key,
            "input_id": request.input_id,
        }
        if crash:
            report(facts)
            # The parent kills this process with SIGKILL now; the bound only matters if the
            # parent itself died first.
            await asyncio.sleep(CRASH_WAIT_S)
            return
        # L2: the restart is committed as accepted before the process exits; it is completed
        # by the next instance, not by this one.
        operation = await rt.request_restart(
            conversation_id, reason=RESTART_REASON, input_id=request.input_id
        )
        facts |= {"operation_id": operation.operation_id, "operation_state": operation.state.value}
    report(facts)


@dataclass(frozen=True, slots=True)
class ChildReport:
    """What the child said, and how it ended."""

    facts: dict[str, Any]
    returncode: int | None


class ChildFailed(TidingsError):
    """The demo's child process failed before it reported."""

    code = "demo_child_failed"


async def run_child(
    url: str, conversation_id: str, *, crash: bool, env: Mapping[str, str],
    within_s: float = 30.0,
) -> tuple[ChildReport, Callable[[], Any]]:
    """Start the child and wait for its report. Returns the report and, for ``crash``, a
    coroutine function that SIGKILLs it (the child is still running)."""
    args = [sys.executable, "-m", "tidings", "demo-child", url, conversation_id]
    if crash:
        args.append("--crash")
    child = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert child.stdout is not None
    assert child.stderr is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), within_s)
        if not crash:
            await asyncio.wait_for(child.wait(), within_s)
    except TimeoutError:
        line = b""
    if not line:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
        error = (await child.stderr.read()).decode("utf-8", "replace").strip().splitlines()
        raise ChildFailed(f"the child process failed: {error[-1] if error else 'no output'}")

    async def kill() -> int:
        with contextlib.suppress(ProcessLookupError):
            child.kill()  # SIGKILL: no shutdown code runs
        return await child.wait()

    return ChildReport(json.loads(line), child.returncode), kill
