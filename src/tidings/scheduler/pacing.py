"""Pacing the turns that start in one pass of the event loop.

One commit of the store can answer many callers at once: fifty people's posts land in one
group, fifty drivers start in the next pass of the loop, and fifty turns would take their first
step (building the model's request: about a tenth of a millisecond each) in the pass after
that -- several milliseconds in which no other callback runs, a stall every conversation of the
process feels. A :class:`Pacer` lets the turns that start in one pass spend a budget of that
pass; a turn that finds it spent waits for a later pass, in the order it came. Nothing waits
when turns start one at a time.
"""

from __future__ import annotations

import asyncio
import time

PASS_BUDGET_S = 0.001
"""The default of ``CoordinatorConfig.turn_start_budget``: how long the turns starting in one pass
may run before the next waits for a later pass: at 100 busy conversations on PostgreSQL, 1 ms
took the loop's lag p99 from about 8.5 to 5 ms at the same CPU per turn; 0.5 ms took it no lower
and cost a sixteenth more CPU per turn (more passes), 1.5 ms left it at 5.5 ms."""


class Pacer:
    """Spreads the first steps of turns that start together over passes of the loop."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._began: float | None = None
        """When the first turn of this pass started; None until one does."""
        self.deferred = 0
        """How many turns waited for a later pass."""

    async def step(self) -> None:
        """Return when this pass still has budget for a turn to start in, or in a later pass."""
        waited = False
        while True:
            now = time.perf_counter()
            if self._began is None:
                self._began = now
                # Runs at the start of the next pass, before what waits below.
                asyncio.get_running_loop().call_soon(self._next_pass)
                return
            if now - self._began < self.budget_s:
                return
            if not waited:
                waited = True
                self.deferred += 1
            await asyncio.sleep(0)

    def _next_pass(self) -> None:
        self._began = None
