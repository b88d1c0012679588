"""H5 (flat memory): what a turn's units build -- the locked conversation, its slot, the rows
read and written -- is freed when the unit is done, not left in reference cycles for the
garbage collector. At a hundred busy conversations such cycles were most of the collector's
work: every unit's transaction waited for a collection, and the collections that freed them
held the event loop.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Awaitable, Callable

from tests.conftest import Backend, RuntimeFactory
from tidings import Outbox, Profile, ScriptedModel


def _tidings_objects(objects: list[object]) -> list[str]:
    """Instances of tidings' classes, and functions and coroutines of its code, by name."""
    found: set[str] = set()
    for o in objects:
        if type(o).__module__.startswith("tidings."):
            found.add(type(o).__qualname__)
        elif isinstance(o, types.FunctionType | types.CoroutineType) and (
                o.__module__ or "").startswith("tidings."):
            found.add(o.__qualname__)
    return sorted(found)


async def _left_in_cycles(step: Callable[[int], Awaitable[None]]) -> list[str]:
    """The tidings objects that five calls of ``step`` left in reference cycles (after three
    that fill the caches and take the first-time paths)."""
    for n in range(3):
        await step(n)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept, to be read
    try:
        for n in range(3, 8):
            await step(n)
        gc.collect()
        return _tidings_objects(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_h5_a_turns_units_leave_no_reference_cycles(runtimes: RuntimeFactory) -> None:
    rt = await runtimes(models=[ScriptedModel()])
    conv = (await rt.create_conversation("alice", Profile(model="scripted"))).conversation_id

    async def turn(n: int) -> None:
        await rt.post(conv, f"hello {n}", wait=True)

    assert await _left_in_cycles(turn) == []


async def test_h5_a_signal_published_claimed_and_consumed_leaves_no_reference_cycles(
    backend: Backend,
) -> None:
    async with Outbox.open(backend.url) as ob:

        async def message(n: int) -> None:
            await ob.publish_alone(ob.signal("conv_h5", "task.exited", {"n": n, "ref": {"a": 1}}))
            lease = await ob.claim("conv_h5", max_count=1)
            await ob.consume(lease, lambda tx: None, failure_code="failed")

        assert await _left_in_cycles(message) == []
