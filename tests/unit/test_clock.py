"""The manual clock keeps the kernel's timed waits: they end when it is moved past their end,
never on real time -- so a test drives the sweeps, the keeper and the cool-downs by moving it."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from tidings.clock import ManualClock, SystemClock
from tidings.support.lifetime import Lifetime, Loop


async def test_manual_clock_a_sleep_ends_when_the_clock_passes_its_end_not_before() -> None:
    clock = ManualClock()
    sleeper = asyncio.ensure_future(clock.sleep(5))
    await asyncio.sleep(0.05)  # real time passes; the clock does not
    assert not sleeper.done()
    clock.advance(timedelta(seconds=4))
    await asyncio.sleep(0.01)
    assert not sleeper.done()
    clock.advance(timedelta(seconds=1))
    await asyncio.wait_for(sleeper, 1)


async def test_manual_clock_a_timed_wait_ends_on_its_event_or_on_the_clock() -> None:
    clock = ManualClock()
    event = asyncio.Event()
    waiting = asyncio.ensure_future(clock.wait(event, 60))
    await asyncio.sleep(0.01)
    event.set()
    assert await asyncio.wait_for(waiting, 1) is True
    waiting = asyncio.ensure_future(clock.wait(asyncio.Event(), 60))
    await asyncio.sleep(0.01)
    clock.advance(timedelta(minutes=1))
    assert await asyncio.wait_for(waiting, 1) is False


async def test_manual_clock_moved_from_another_thread_wakes_the_loops_sleepers() -> None:
    clock = ManualClock()
    sleeper = asyncio.ensure_future(clock.sleep(1))
    await asyncio.sleep(0.01)
    mover = threading.Thread(target=clock.advance, args=(timedelta(seconds=2),))
    mover.start()
    mover.join()
    await asyncio.wait_for(sleeper, 1)


async def test_system_clock_sleeps_and_waits_in_real_time() -> None:
    clock = SystemClock()
    await asyncio.wait_for(clock.sleep(0.01), 1)
    assert await clock.wait(asyncio.Event(), 0.01) is False


async def test_lifetime_on_the_manual_clock_runs_a_failed_component_again_once_moved() -> None:
    clock = ManualClock()
    runs = 0
    again = asyncio.Event()

    async def fails_once() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("the first run fails")
        again.set()
        await asyncio.Event().wait()

    lifetime = Lifetime([Loop("flaky", fails_once)], restart_base_s=10, clock=clock)
    lifetime.start()
    await asyncio.sleep(0.1)
    assert runs == 1  # real time passed; the pause is on the clock
    clock.advance(timedelta(seconds=10))
    await asyncio.wait_for(again.wait(), 5)
    assert lifetime.restarts == 1
    await lifetime.shutdown()
