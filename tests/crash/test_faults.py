"""Issue 7, faults: a real file-size limit under SQLite (the disk is "full" for the process:
``RLIMIT_FSIZE``; a write past it fails with EFBIG, which SQLite reports as an I/O error).
Posts then fail with a typed store error -- never a success for what did not commit --
nothing committed before is lost, and once the limit is lifted the same runtime goes on
without a restart: a turn that could not write its end keeps the slot only until its lease
runs out, then the sweep closes it and the queued words are answered."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

CHILD = """
import asyncio, json, os, resource, signal, sys
from datetime import timedelta
from tidings import Profile, Runtime
from tidings.runtime.root import RuntimeConfig
from tidings.turns.plan import TurnConfig
from tidings.errors import StoreError, TidingsError
from tidings.models.scripted import ScriptedModel
from tests.waiting import eventually

PATH = sys.argv[1]

def size() -> int:
    return max(os.path.getsize(p) for p in (PATH, PATH + "-wal") if os.path.exists(p))

async def main() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, EFBIG
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    config = RuntimeConfig(turns=TurnConfig(slot_ttl=timedelta(seconds=1)))
    model = ScriptedModel(default={"text": "ok"})
    async with Runtime.open(PATH, models=[model], config=config) as rt:
        conv = (await rt.create_conversation("alice", Profile(model="scripted"))).conversation_id
        await rt.post(conv, "before the disk filled")
        await rt.settle(conv)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size() + 256 * 1024, hard))
        accepted, refused = [], []
        for i in range(400):
            try:
                item = await rt.post(conv, f"filler {i} " + "x" * 8_000)
                accepted.append(item.input_id)
            except TidingsError as exc:
                refused.append({"type": type(exc).__name__, "code": exc.code,
                                "store": isinstance(exc, StoreError)})
                if len(refused) >= 3:
                    break
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
        await rt.settle(conv)
        after = await rt.post(conv, "after the disk had room again")
        # A turn that could not write its end holds the slot until its lease runs out; then
        # the sweep closes it (interrupted) and the queued words are answered -- no restart.
        async def answered() -> bool:
            await rt.coordinator.sweep()
            await rt.settle(conv)
            return (await rt.transcript(conv))[-1].content == "ok" and all(
                i.state.value != "queued" for i in await rt.inputs.list(conv))

        await eventually(answered, what="the queued words answered after the sweep",
                         within_s=30, poll_s=0.2)
        stored = {i.input_id for i in await rt.inputs.list(conv)}
        runs = await rt.runs.list(conv)
        print(json.dumps({
            "accepted": len(accepted), "refused": refused,
            "accepted_all_stored": all(a in stored for a in accepted),
            "after_stored": after.input_id in stored,
            "last_run": runs[-1].status.value,
            "first_message": (await rt.transcript(conv))[0].content,
        }), flush=True)

asyncio.run(main())
"""


async def test_s1_a_full_disk_refuses_typed_loses_nothing_and_recovers_in_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "full.db"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(path), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode == 0, err.decode()[-3000:]
    facts = json.loads(out.decode().strip().splitlines()[-1])
    assert facts["refused"], facts  # the limit was reached
    assert all(r["store"] for r in facts["refused"]), facts  # typed: a store error
    assert facts["refused"][0]["code"] in ("disk_full", "store_error"), facts
    assert facts["accepted"] > 0
    assert facts["accepted_all_stored"]  # every post that said "accepted" is there
    assert facts["first_message"] == "before the disk filled"  # nothing earlier lost
    assert facts["after_stored"]  # the same runtime goes on once there is room
    assert facts["last_run"] == "completed", facts
