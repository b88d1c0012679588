"""Issue 7's crash torture, CI variant: at least 50 SIGKILLs of real runtime processes at
random moments on each backend -- one process on SQLite, two on PostgreSQL where either can be
killed -- then a drain, and the invariant checker over the database and every transcript:
every settled task notified once, every owed child reply relayed once, no message inside a
tool exchange, no overlapping turns, nothing replayed, no operation left accepted."""

from __future__ import annotations

import pytest

from tests.conftest import Backend
from tests.crash.torture import run_torture

KILLS = 50
WORKLOAD = {"tasks": 50, "child_requests": 10, "runs": 200}
"""What the kills must have cut into: on a slow machine the torture goes on killing (up to
three times as often) until the database holds that much work."""
pytestmark = pytest.mark.xdist_group("torture")  # never beside the locked runtime's tests


async def test_crash_torture_fifty_kills_leave_no_violation(backend: Backend) -> None:
    processes = 2 if backend.name == "postgres" else 1
    result = await run_torture(backend.url, kills=KILLS, processes=processes, seed=11,
                               min_s=0.05, max_s=0.5, workload=WORKLOAD)
    assert result.kills >= KILLS
    counts = result.report.counts
    # The workload did what a torture needs: tasks, children, interrupted calls, many turns.
    assert all(counts[k] > n for k, n in WORKLOAD.items()), counts
    assert result.violations == [], "\n".join(str(v) for v in result.violations[:40])
