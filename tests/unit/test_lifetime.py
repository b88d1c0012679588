"""S9: the runtime's components run in one task group and stop in order -- what stops first
(running turns) can rely on what stops last (the outbox retiring the instance). No database."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from tests.waiting import wait_until
from tidings.clock import wait_set
from tidings.support.lifetime import Lifetime, Loop, first_of


class Recorder:
    def __init__(self) -> None:
        self.log: list[str] = []

    def loop(self, name: str, *, fail: bool = False) -> Loop:
        async def serve() -> None:
            self.log.append(f"{name} runs")
            if fail:
                raise RuntimeError(f"{name} broke")
            await asyncio.Event().wait()

        async def first() -> None:
            self.log.append(f"{name} closes")

        async def then() -> None:
            self.log.append(f"{name} closed")

        return Loop(name, serve, first=first, then=then)


async def test_s9_components_stop_in_order_and_a_second_shutdown_does_nothing() -> None:
    recorder = Recorder()
    lifetime = Lifetime([recorder.loop("turns"), recorder.loop("outbox")])
    lifetime.start()
    await wait_until(lambda: len(recorder.log) == 2, what="both running")
    assert sorted(recorder.log) == ["outbox runs", "turns runs"]
    recorder.log.clear()
    await lifetime.shutdown()
    assert recorder.log == ["turns closes", "turns closed", "outbox closes", "outbox closed"]
    await lifetime.shutdown()
    assert len(recorder.log) == 4
    assert all(task.get_name() != "turns" for task in asyncio.all_tasks())


async def test_s9_a_runtime_never_started_still_closes_each_component_once() -> None:
    recorder = Recorder()
    turns, outbox = recorder.loop("turns"), recorder.loop("outbox")
    await Lifetime([turns, outbox]).shutdown()
    assert recorder.log == ["turns closes", "turns closed", "outbox closes", "outbox closed"]
    await turns.run()  # shut down before it ran: it never runs
    assert "turns runs" not in recorder.log


async def test_s9_one_component_failing_leaves_the_others_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    lifetime = Lifetime([recorder.loop("sweep", fail=True), recorder.loop("outbox")])
    with caplog.at_level(logging.ERROR, logger="tidings.lifetime"):
        lifetime.start()
        await wait_until(lambda: "sweep broke" in caplog.text, what="the failure logged")
    outbox = next(t for t in asyncio.all_tasks() if t.get_name() == "outbox")
    assert not outbox.done()
    await lifetime.shutdown()
    assert outbox.done()
    assert recorder.log[-2:] == ["outbox closes", "outbox closed"]


async def test_s9_a_failed_component_runs_again_after_a_growing_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def serve() -> None:
        runs.append(loop.time())
        if len(runs) <= 3:
            raise RuntimeError(f"broke on run {len(runs)}")
        await asyncio.Event().wait()

    failures: list[str] = []
    lifetime = Lifetime([Loop("sweep", serve)], restart_base_s=0.05, restart_cap_s=0.1,
                        on_failure=failures.append)
    with caplog.at_level(logging.ERROR, logger="tidings.lifetime"):
        lifetime.start()
        await wait_until(lambda: len(runs) == 4, what="the fourth run, which works")
    assert lifetime.restarts == 3
    assert failures == ["sweep"] * 3  # each failure told (the runtime counts them by name)
    assert "sweep ended on an error (3 in a row); it runs again in 0.1 s" in caplog.text
    pauses = [b - a for a, b in itertools.pairwise(runs)]
    assert pauses[0] >= 0.05
    assert pauses[1] >= 0.1  # doubled, then held at the cap
    assert pauses[2] >= 0.1
    sweep = next(t for t in asyncio.all_tasks() if t.get_name() == "sweep")
    assert not sweep.done()  # running again, not dead
    await lifetime.shutdown()
    assert sweep.done()


async def test_s9_shutdown_does_not_wait_out_a_failed_components_pause() -> None:
    failed = asyncio.Event()

    async def serve() -> None:
        failed.set()
        raise RuntimeError("broke")

    lifetime = Lifetime([Loop("sweep", serve)], restart_base_s=3600, restart_cap_s=3600)
    lifetime.start()
    await wait_set(failed, 20)
    await asyncio.wait_for(lifetime.shutdown(), 20)  # not the hour of its pause
    assert lifetime.restarts == 0


class Worker(Loop):
    """A component class of its own: its work and its hooks, the cancellation inherited."""

    def __init__(self, name: str, log: list[str], *, fail_first: bool = False) -> None:
        super().__init__(name)
        self.log = log
        self.fail_first = fail_first

    async def serve(self) -> None:
        self.log.append(f"{self.name} runs")
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError(f"{self.name} broke")
        try:
            await asyncio.Event().wait()
        finally:
            self.log.append(f"{self.name} cancelled")

    async def stopping(self) -> None:
        self.log.append(f"{self.name} closes")

    async def stopped(self) -> None:
        self.log.append(f"{self.name} closed")


async def test_s9_a_component_class_has_its_hooks_around_its_work_in_order() -> None:
    log: list[str] = []
    turns, outbox = Worker("turns", log), Worker("outbox", log)
    lifetime = Lifetime([turns, outbox])
    lifetime.start()
    await wait_until(lambda: len(log) == 2, what="both running")
    log.clear()
    await lifetime.shutdown()
    assert log == ["turns closes", "turns cancelled", "turns closed",
                   "outbox closes", "outbox cancelled", "outbox closed"]
    await turns.shutdown()  # idempotent: nothing runs twice
    await asyncio.wait_for(turns.run(), 5)  # after shutdown: returns at once
    assert len(log) == 6


async def test_s9_a_component_class_shut_down_before_it_ran_runs_both_hooks_once() -> None:
    log: list[str] = []
    worker = Worker("sweep", log)
    await worker.shutdown()
    await worker.shutdown()
    await asyncio.wait_for(worker.run(), 5)
    assert log == ["sweep closes", "sweep closed"]


async def test_s9_a_component_class_runs_again_after_a_failure_and_still_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []
    worker = Worker("sweep", log, fail_first=True)
    lifetime = Lifetime([worker], restart_base_s=0.01, restart_cap_s=0.01)
    with caplog.at_level(logging.ERROR, logger="tidings.lifetime"):
        lifetime.start()
        await wait_until(lambda: log.count("sweep runs") == 2, what="the second run")
    await lifetime.shutdown()
    assert log == ["sweep runs", "sweep runs", "sweep closes", "sweep cancelled", "sweep closed"]
    assert lifetime.restarts == 1


async def test_l5_first_of_returns_with_the_first_wait_and_reaps_the_other() -> None:
    """What settle waits on: the conversation idle, or a turn held for a person."""
    done = asyncio.Event()
    reaped: list[str] = []

    async def idle() -> None:
        await done.wait()

    async def held() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            reaped.append("held")

    done.set()
    await first_of(idle(), held())
    assert reaped == ["held"]


async def test_s9_a_timed_wait_cancelled_as_its_wake_comes_is_cancelled() -> None:
    """A component's loop waits for a wake with a timeout; cancelled in the very step its wake
    is set (a commit's hint arriving as the runtime closes), the wait is cancelled -- not taken
    for the wake, which would leave the loop running and its shutdown waiting for ever."""
    wake = asyncio.Event()
    waiting = asyncio.create_task(wait_set(wake, 1.0))
    await asyncio.sleep(0)
    wake.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await wait_set(wake, 0.01)  # and an event set is said so

async def test_s9_first_of_cancelled_while_reaping_stays_cancelled() -> None:
    """A settle wait cancelled from outside while it reaps its other wait is cancelled: it
    does not return as if the first wait had ended."""
    done = asyncio.Event()
    reaping = asyncio.Event()

    async def held() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            reaping.set()
            await asyncio.sleep(0.05)  # its clean-up takes a moment

    task = asyncio.create_task(first_of(done.wait(), held()))
    await asyncio.sleep(0)
    done.set()
    await reaping.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
