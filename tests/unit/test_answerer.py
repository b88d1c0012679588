"""How a store answers the callers of a group it committed, without a database: a slice per
pass of the event loop, in commit order, so that whatever else the loop has to do (a timer, a
socket, another request) waits behind some callers' next steps, not behind all of them."""

from __future__ import annotations

import asyncio

from tidings.store.jobs import SLICES, Answerer, Job


def committed_jobs(loop: asyncio.AbstractEventLoop, count: int) -> list[Job]:
    jobs = [Job(lambda tx: None, loop, loop.create_future()) for _ in range(count)]
    for n, job in enumerate(jobs):
        job.result = n
    return jobs


async def test_a_hundred_callers_committed_together_are_answered_a_slice_per_pass() -> None:
    loop = asyncio.get_running_loop()
    jobs = committed_jobs(loop, 100)
    resumed: list[int] = []

    async def caller(job: Job) -> None:
        resumed.append(await job.future)

    callers = [asyncio.create_task(caller(job)) for job in jobs]
    await asyncio.sleep(0)  # every caller is waiting for its answer
    seen_per_pass: list[int] = []

    def each_pass() -> None:  # other work on the loop: it runs once per pass meanwhile
        seen_per_pass.append(len(resumed))
        if len(resumed) < len(jobs):
            loop.call_soon(each_pass)

    Answerer().add(jobs)
    loop.call_soon(each_pass)
    await asyncio.gather(*callers)

    assert resumed == list(range(100))  # in the order they committed
    counts = [b - a for a, b in zip([0, *seen_per_pass], seen_per_pass, strict=False)]
    assert SLICES[0] <= counts[0] < 100  # the loop ran other work before all were answered
    assert max(counts) <= SLICES[1]


async def test_a_caller_that_stopped_waiting_is_skipped_and_the_others_are_answered() -> None:
    loop = asyncio.get_running_loop()
    jobs = committed_jobs(loop, 20)
    jobs[3].future.cancel()
    failed = committed_jobs(loop, 1)[0]
    failed.error = RuntimeError("the commit failed")
    answerer = Answerer()
    answerer.add([*jobs, failed])
    answerer.flush()  # a store that closes answers everyone at once
    assert [job.future.result() for job in jobs if not job.future.cancelled()] == [
        n for n in range(20) if n != 3]
    assert isinstance(failed.future.exception(), RuntimeError)
