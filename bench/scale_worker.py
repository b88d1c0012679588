"""One runtime process of the scale-out bench: ``scale_worker.py URL INDEX PROCESSES USERS``.

Opens a runtime on URL, takes its share of the bench's conversations (every PROCESSES-th,
from INDEX), prints ``{"ready": true}``, waits for a line on stdin -- the seconds to run --
and then USERS closed-loop users each post a person's words to one of their conversations and
wait for the turn that answers it, again and again. At the end it prints one JSON line: the
turns it saw answered and their latencies (post -> answer committed); then, at a second
line on stdin (once the driver has read the CPU counters), it closes cleanly.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import harness  # noqa: F401  (first: it keeps bench/a2a.py from shadowing the a2a package)

from tidings import Profile, Runtime
from tidings.models.scripted import ScriptedModel
from tidings.runtime.root import RuntimeConfig

OWNER = "scale"
MODEL = ScriptedModel(default={"text": "ok"})


def say(line: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def setup(url: str, conversations: int) -> None:
    async with Runtime.open(url, models=[MODEL]) as rt:
        for n in range(conversations):
            await rt.create_conversation(OWNER, Profile(model="scripted"), title=f"scale {n}")


async def work(url: str, index: int, processes: int, users: int) -> None:
    async with Runtime.open(url, models=[MODEL], config=RuntimeConfig()) as rt:
        everyone: list[str] = []
        after = ""
        while page := await rt.catalog.list_owned(OWNER, after=after, limit=1000):
            everyone += [c.conversation_id for c in page]
            after = page[-1].conversation_id
        mine = sorted(everyone)[index::processes]
        say({"ready": True, "conversations": len(mine)})
        seconds = float(await asyncio.get_running_loop().run_in_executor(
            None, sys.stdin.readline))
        latencies: list[float] = []
        deadline = time.monotonic() + seconds

        async def user(convs: list[str]) -> None:
            n = 0
            while time.monotonic() < deadline:
                conv = convs[n % len(convs)]
                n += 1
                t0 = time.perf_counter()
                await rt.post(conv, f"hello {n}")
                await rt.settle(conv)
                latencies.append(time.perf_counter() - t0)

        shares = [mine[u::users] for u in range(users)]
        await asyncio.gather(*(user(s) for s in shares if s))
        say({"turns": len(latencies), "latencies": latencies})
        # The driver reads this process's CPU (and PostgreSQL's) now, then lets it close.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def main() -> None:
    url = sys.argv[1]
    if sys.argv[2] == "setup":
        asyncio.run(setup(url, int(sys.argv[3])))
        return
    asyncio.run(work(url, int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))


if __name__ == "__main__":
    main()
