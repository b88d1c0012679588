"""How the coordinator paces the turns that start together, without a database: the turns that
start in one pass of the event loop share a budget of it, the rest start in later passes in the
order they came, and a turn that starts alone never waits."""

from __future__ import annotations

import asyncio
import time

from tidings.scheduler.pacing import Pacer

STEP_S = 0.0005
"""What each turn's first step costs in these tests (a third of the budget below)."""


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_c5_fifty_turns_starting_together_spread_over_passes_in_order() -> None:
    loop = asyncio.get_running_loop()
    pacer = Pacer(budget_s=0.0015)
    passes = 0
    started: list[tuple[int, int]] = []  # (turn, pass it started in)

    def each_pass() -> None:  # other work on the loop: it runs once per pass meanwhile
        nonlocal passes
        passes += 1
        if len(started) < 50:
            loop.call_soon(each_pass)

    async def turn(n: int) -> None:
        await pacer.step()
        started.append((n, passes))
        spin(STEP_S)

    loop.call_soon(each_pass)
    await asyncio.gather(*(turn(n) for n in range(50)))

    assert [n for n, _ in started] == list(range(50))  # in the order they came
    per_pass: dict[int, int] = {}
    for _, seen in started:
        per_pass[seen] = per_pass.get(seen, 0) + 1
    # 1.5 ms of budget, 0.5 ms a step: three at most in a pass (fewer if the machine is slow),
    # so the other work ran at least every 1.5 ms plus one step.
    assert max(per_pass.values()) <= 3
    assert len(per_pass) >= 17
    # All fifty asked in one pass: those that did not start in it waited, each counted once.
    assert pacer.deferred == 50 - per_pass[started[0][1]]


async def test_c5_with_no_budget_one_turn_starts_per_pass() -> None:
    pacer = Pacer(budget_s=0.0)
    loop = asyncio.get_running_loop()
    passes = 0
    started: list[int] = []

    def each_pass() -> None:
        nonlocal passes
        passes += 1
        if len(started) < 10:
            loop.call_soon(each_pass)

    async def turn() -> None:
        await pacer.step()
        started.append(passes)

    loop.call_soon(each_pass)
    await asyncio.gather(*(turn() for _ in range(10)))

    assert len(set(started)) == 10  # each in a pass of its own
    assert pacer.deferred == 9


async def test_c5_a_turn_starting_alone_never_waits_for_a_pass() -> None:
    loop = asyncio.get_running_loop()
    pacer = Pacer(budget_s=0.0015)
    for _ in range(20):
        other_ran = False

        def other() -> None:
            nonlocal other_ran
            other_ran = True

        loop.call_soon(other)
        await pacer.step()  # returns in this very step: the callback above has not run
        assert not other_ran
        await asyncio.sleep(0.002)  # the next turn starts in a pass of its own
    assert pacer.deferred == 0


async def test_c5_a_turn_cancelled_while_it_waits_leaves_the_others_to_start() -> None:
    pacer = Pacer(budget_s=0.0015)
    started: list[int] = []

    async def turn(n: int) -> None:
        await pacer.step()
        started.append(n)
        spin(STEP_S)

    tasks = [asyncio.create_task(turn(n)) for n in range(10)]
    await asyncio.sleep(0)  # each took its first step: some started, the rest wait
    assert 0 < len(started) < 10
    waiting = next(t for n, t in enumerate(tasks) if n not in started)
    waiting.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 1
    assert len(started) == 9
    assert started == sorted(started)

