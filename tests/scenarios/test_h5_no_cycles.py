"""H5 (flat memory): what a turn's units build -- the locked conversation, its slot, the rows
read and written -- is freed when the unit is done, not left in reference cycles for the
garbage collector. At a hundred busy conversations such cycles were most of the collector's
work: every unit's transaction waited for a collection, and the collections that freed them
held the event loop.
"""

from __future__ import annotations

import gc

from tests.conftest import RuntimeFactory
from tidings import Profile, ScriptedModel


def _tidings_objects(objects: list[object]) -> list[str]:
    return sorted({type(o).__qualname__ for o in objects
                   if type(o).__module__.startswith("tidings.")})


async def test_h5_a_turns_units_leave_no_reference_cycles(runtimes: RuntimeFactory) -> None:
    rt = await runtimes(models=[ScriptedModel()])
    conv = (await rt.create_conversation("alice", Profile(model="scripted"))).conversation_id
    for n in range(3):  # caches filled, first-time paths taken
        await rt.post(conv, f"warm {n}", wait=True)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept, to be read
    try:
        for n in range(5):
            await rt.post(conv, f"hello {n}", wait=True)
        gc.collect()
        left = _tidings_objects(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []
