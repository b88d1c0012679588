"""The other process of the feed's cluster tests: ``feed_peer.py URL``.

It opens a :class:`~tidings.runtime.Runtime` on the PostgreSQL database at URL whose model
streams ``PIECES``: the first at once, each next one when the parent says so. It reads
commands from stdin, one JSON line each, and announces on stdout as JSON lines
``{"checkpoint": ...}``:

- ``{"post": CONVERSATION, "text": TEXT}`` posts a person's input (the turn runs here) and
  announces ``posted``;
- ``{"allow": N}`` lets the model write N more pieces;
- ``{"exit": true}`` (or the end of input) closes the runtime and announces ``closed``.

Each piece written is announced (``piece`` with its index) after it was handed to the feed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from tidings import ModelReply, ModelRequest, Runtime
from tidings.models.base import DeltaCallback

PIECES = ("Once ", "upon ", "a time.")
OWNER = "alice"


def announce(checkpoint: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"checkpoint": checkpoint, **fields}) + "\n")
    sys.stdout.flush()


class Pieces:
    name = "scripted"

    def __init__(self) -> None:
        self.allowed = asyncio.Semaphore(0)

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        for index, piece in enumerate(PIECES):
            if index:
                await self.allowed.acquire()
            if on_delta is not None:
                on_delta(piece)
            announce("piece", index=index)
        return ModelReply("".join(PIECES), model=request.model)


async def serve(url: str) -> None:
    model = Pieces()
    async with Runtime.open(url, models=[model]) as runtime:
        announce("ready")
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            command = json.loads(line)
            if "post" in command:
                await runtime.post(command["post"], command["text"], owner=OWNER)
                announce("posted")
            elif "allow" in command:
                for _ in range(int(command["allow"])):
                    model.allowed.release()
            elif command.get("exit"):
                break
    announce("closed")


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
