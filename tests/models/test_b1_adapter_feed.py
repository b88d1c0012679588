"""B1 with the SDK adapters: the pieces an OpenAI-compatible or an Anthropic server streams
reach a watcher of the conversation as they arrive, then the committed answer -- a whole turn
through a runtime on each backend, against a server on loopback speaking the protocol."""

from __future__ import annotations

from tests.conftest import RuntimeFactory
from tests.feeding import Collector, assembled, committed, deltas, turn_ended
from tests.models.loopback import (
    LoopbackServer,
    anthropic_end,
    anthropic_start,
    anthropic_stream,
    anthropic_text_block,
    openai_chunk,
    openai_stream,
)
from tidings import Profile
from tidings.models.anthropic import AnthropicModel
from tidings.models.base import Model
from tidings.models.openai import OpenAIChatModel

PIECES = ["The ", "answer ", "is ", "42."]


async def watch_a_turn(runtimes: RuntimeFactory, model: Model) -> None:
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation("alice", Profile(model=model.name))).conversation_id
    watcher = Collector(rt.watch(conv, owner="alice"))
    await rt.post(conv, "what is the answer?", owner="alice")
    events = await watcher.until(turn_ended, what="the turn's end")

    # The pieces arrive in order, each where the last ended (pieces that queued while the
    # watcher was busy come merged into one delta).
    assert deltas(events)[0][0] == 0
    assert assembled(events) == "".join(PIECES)
    [answer] = committed(events, "assistant")
    assert answer["content"] == "".join(PIECES)
    last_delta = max(i for i, e in enumerate(events) if e.type == "message_delta")
    assert events.index(next(e for e in events if e.type == "message_committed"
                             and e.data["message"]["role"] == "assistant")) > last_delta
    await watcher.stop()


async def test_b1_openai_stream_reaches_a_watcher_piece_by_piece(
    runtimes: RuntimeFactory, server: LoopbackServer
) -> None:
    chunks = [openai_chunk(content=piece, role=i == 0) for i, piece in enumerate(PIECES)]
    server.push(openai_stream([*chunks, openai_chunk(finish_reason="stop"),
                               openai_chunk(usage=(9, 4))]))
    model = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1", timeout=5.0)
    try:
        await watch_a_turn(runtimes, model)
    finally:
        await model.aclose()
    assert server.requests[0].body["stream"] is True


async def test_b1_anthropic_stream_reaches_a_watcher_piece_by_piece(
    runtimes: RuntimeFactory, server: LoopbackServer
) -> None:
    server.push(anthropic_stream([anthropic_start(), *anthropic_text_block(0, PIECES),
                                  *anthropic_end(output_tokens=4)]))
    model = AnthropicModel("served-model", base_url=server.base_url, timeout=5.0)
    try:
        await watch_a_turn(runtimes, model)
    finally:
        await model.aclose()
    assert server.requests[0].body["stream"] is True
