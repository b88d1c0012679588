"""C1 and L5: the turns a process runs at once. A turn waiting for a person lends its place,
takes it back before it goes on, and the count of places stays exact even when a turn is
stopped while it waits to take its place back."""

from __future__ import annotations

import asyncio

import pytest

from tidings.scheduler.capacity import Capacity


async def test_c1_l5_a_turn_waiting_for_a_person_lends_its_place_and_takes_it_back() -> None:
    places = Capacity(1)
    await places.take()  # turn A runs
    assert places.full()
    waiting = places.lender()
    async with waiting(), waiting():  # A's two held calls wait side by side: one place lent
        assert not places.full()
        assert places.lent == 1
        await places.take()  # turn B runs meanwhile
        assert places.full()
        places.give_back()  # and ends
    assert places.full()  # A has its place back
    assert places.lent == 0
    places.give_back()
    assert not places.full()


async def test_c1_l5_a_turn_stopped_while_taking_its_place_back_leaves_the_count_exact() -> None:
    places = Capacity(1)
    await places.take()  # turn A runs, then waits for a person
    block = places.lender()()
    await block.__aenter__()
    await places.take()  # turn B runs meanwhile
    back = asyncio.create_task(block.__aexit__(None, None, None))  # A was answered: it waits
    await asyncio.sleep(0)
    assert not back.done()
    back.cancel()  # A is stopped while it waits for its place
    with pytest.raises(asyncio.CancelledError):
        await back
    places.give_back()  # A's end gives back the place it never took back: nothing is freed
    assert places.full()  # B still runs
    places.give_back()  # B ends
    assert not places.full()
    await places.take()  # one place, exactly
    assert places.full()


def test_c1_a_process_runs_at_least_one_turn() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Capacity(0)
