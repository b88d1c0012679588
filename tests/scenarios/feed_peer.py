"""The other process of the feed's cluster tests: ``feed_peer.py URL [--last-after-commit]``.

It opens a :class:`~tidings.runtime.root.Runtime` on the PostgreSQL database at URL whose model
streams ``PIECES``: the first at once, each next one when the parent says so. It reads
commands from stdin, one JSON line each, and announces on stdout as JSON lines
``{"checkpoint": ...}``:

- ``{"post": CONVERSATION, "text": TEXT}`` posts a person's input (the turn runs here) and
  announces ``posted``;
- ``{"allow": N}`` lets the model write N more pieces;
- ``{"exit": true}`` (or the end of input) closes the runtime and announces ``closed``.

Each piece written is announced (``piece`` with its index) after it was handed to the feed.

With ``--last-after-commit`` the live messages that reach the answer's end are sent only once
the answer has committed: the order a slow send gives them (the pieces and the commit travel
by different connections), made certain instead of left to chance.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from tidings import FeedEvent, ModelReply, ModelRequest, Runtime
from tidings.feed import wire
from tidings.feed.drafts import committed_step
from tidings.models.base import DeltaCallback

PIECES = ("Once ", "upon ", "a time.")
ANSWER = "".join(PIECES)
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


class LastAfterCommit:
    """Holds each send of live messages that reaches the answer's end until the answer's
    ``message_committed`` is in the journal (a commit of the conversation is heard, then the
    journal read)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.send = runtime.store.publish_feed
        self.heard = asyncio.Event()
        runtime.store.feed.subscribe(lambda hints, _written: self.heard.set(),
                                     lambda messages: None)
        runtime.store.publish_feed = self.publish  # type: ignore[method-assign]

    async def publish(self, messages: Sequence[str]) -> None:
        for message in messages:
            live = wire.decode(message)
            if (live is not None and live.kind == wire.DELTA
                    and (live.final or live.offset + len(live.text) == len(ANSWER))):
                await self.committed(live.conversation_id, (live.run_id, live.step))
        await self.send(messages)

    async def committed(self, conversation_id: str, key: tuple[str, int]) -> None:
        while True:
            self.heard.clear()  # before reading: a commit heard during the read reads again
            events = await self.runtime.events(conversation_id, owner=OWNER)
            if any(committed_step(FeedEvent.of(event)) == key for event in events):
                return
            await self.heard.wait()


async def serve(url: str, *, last_after_commit: bool) -> None:
    model = Pieces()
    async with Runtime.open(url, models=[model]) as runtime:
        if last_after_commit:
            LastAfterCommit(runtime)
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
    asyncio.run(serve(sys.argv[1], last_after_commit="--last-after-commit" in sys.argv[2:]))
