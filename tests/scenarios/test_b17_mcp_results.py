"""B17: nothing dropped -- a result up to 2 MiB arrives whole (over streamable HTTP too), is kept
as a result envelope the model can page once it passes the tool-result cut, and what is dropped
past 2 MiB is stated; a malformed tool is skipped, never the server; the client is ``tidings``.

Against real servers: tests/mcp_servers/bulky.py (the SDK's ``MCPServer``) on stdio and on
loopback HTTP, and tests/mcp_servers/raw_listing.py (a hand-written stdio server whose listing
no SDK server would serve).
"""

from __future__ import annotations

import json
import logging
import re
from importlib.metadata import version
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.mcp_servers.bulky import blob_text
from tests.mcp_servers.loopback import BULKY, RAW_LISTING, served, stdio
from tests.scenarios.test_b4_mcp import calling, conversation, turn
from tidings import MCPServer, Profile, ScriptedModel
from tidings.models.base import ModelReply, ModelRequest, ToolCall
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tools.registry import TOOL_RESULT_LIMIT

MIB = 1024 * 1024
PAGES = 3
NOTE = re.compile(r"result_id (\S+), offset (\d+)\]")


class Reader:
    """A model that asks ``bulky.blob`` for ``size`` bytes when told ``blob <size>``, then reads
    on in a kept result with ``tool_result_get`` where the note says, page after page (at most
    ``PAGES``: a turn takes a bounded number of steps)."""

    name = "reader"

    def __init__(self) -> None:
        self.pages: list[dict[str, Any]] = []
        self.head = ""

    async def complete(self, request: ModelRequest, *, on_delta: Any = None) -> ModelReply:
        newest = request.messages[-1]
        call: ToolCall | None = None
        text = ""
        if newest.role == "user" and newest.content.startswith("blob "):
            call = ToolCall(f"c{len(request.messages)}", "bulky.blob",
                            {"size": int(newest.content.split()[1])})
        elif newest.role == "tool" and newest.tool_name == "bulky.blob":
            self.head = newest.content
            found = NOTE.search(newest.content)
            if found is None:
                text = "nothing to page"
            else:
                call = ToolCall(f"c{len(request.messages)}", "tool_result_get",
                                {"result_id": found[1], "offset": int(found[2])})
        elif newest.role == "tool" and newest.tool_name == "tool_result_get":
            page = json.loads(newest.content)
            self.pages.append(page)
            if page["next_offset"] is not None and len(self.pages) < PAGES:
                call = ToolCall(f"c{len(request.messages)}", "tool_result_get",
                                {"result_id": page["result_id"],
                                 "offset": page["next_offset"]})
            else:
                text = "read it all" if page["next_offset"] is None else "read enough"
        else:
            text = "?"
        return ModelReply(text=text, tool_calls=(call,) if call else (), model=request.model,
                          stop_reason="tool_use" if call else "end_turn", input_tokens=1,
                          output_tokens=1)

    def read(self) -> str:
        """The head, without its note, then every page."""
        head = self.head[:self.head.rindex("\n[")]
        return head + "".join(page["text"] for page in self.pages)


async def reader_runtime(runtimes: RuntimeFactory, server: MCPServer, model: Reader, *,
                         key: bool = True) -> Runtime:
    return await runtimes(models={"reader": model},
                          config=RuntimeConfig(mcp_servers=(server,)),
                          master_key=MasterKey.generate() if key else None)


async def reader_conversation(rt: Runtime) -> str:
    created = await rt.create_conversation(
        "alice", Profile(model="reader", tools=("bulky.blob", "bulky.hello", "tool_result_get")))
    return created.conversation_id


async def test_b17_a_2_mib_result_arrives_whole_over_streamable_http_kept_and_paged(
    runtimes: RuntimeFactory,
) -> None:
    model = Reader()
    with served(BULKY, "bulky") as server:
        rt = await reader_runtime(runtimes, server, model)
        conv = await reader_conversation(rt)
        (result, *pages) = await turn(rt, conv, f"blob {2 * MIB}")

        assert result.tool_name == "bulky.blob"
        assert result.meta["is_error"] is False
        assert "dropped_bytes" not in result.meta
        result_id = result.meta["kept_result_id"]
        assert f"the whole result ({2 * MIB:,} bytes) is kept as {result_id}" in result.content
        assert len(result.content.encode()) < TOOL_RESULT_LIMIT + 1024  # the head, a note
        # Nor does the message hold it elsewhere (the SDK server's structured copy of it).
        assert len(json.dumps(result.meta)) < TOOL_RESULT_LIMIT
        # The whole of it, kept.
        ref, data = await rt.results.get(conv, result_id)
        assert ref.size_bytes == 2 * MIB
        assert data.decode() == blob_text(2 * MIB)
        # The model read on with tool_result_get, page after page, every byte in order.
        assert len(pages) == len(model.pages) == PAGES
        read = model.read()
        assert len(read) > 3 * TOOL_RESULT_LIMIT
        assert read == blob_text(2 * MIB)[:len(read)]
        assert (await rt.transcript(conv))[-1].content == "read enough"

        # The connection held: the next call works.
        output = await rt.mcp["bulky"].call("hello", {"name": "Ada"})
        assert (output.is_error, output.content) == (False, "hello Ada")


async def test_b17_past_2_mib_the_result_is_cut_and_says_how_many_bytes_were_dropped(
    runtimes: RuntimeFactory,
) -> None:
    model = Reader()
    rt = await reader_runtime(runtimes, stdio(BULKY, "bulky"), model)
    conv = await reader_conversation(rt)
    size = 2 * MIB + 5_000
    (result, *_) = await turn(rt, conv, f"blob {size}")

    assert result.meta["is_error"] is False
    dropped = result.meta["dropped_bytes"]
    assert 5_000 <= dropped < 6_000  # the excess, and room for the note that says so
    # What was kept is kept whole, and says what was dropped.
    _ref, data = await rt.results.get(conv, result.meta["kept_result_id"])
    text = data.decode()
    kept = size - dropped
    assert text.startswith(blob_text(size)[:kept])
    assert f"the last {dropped:,}" in text
    assert f"result was {size:,} bytes" in text
    read = model.read()
    assert read == text[:len(read)]


async def test_b17_without_a_master_key_the_cut_is_stated(runtimes: RuntimeFactory) -> None:
    model = Reader()
    rt = await reader_runtime(runtimes, stdio(BULKY, "bulky"), model, key=False)
    conv = await reader_conversation(rt)
    (result,) = await turn(rt, conv, "blob 100000")
    assert "kept_result_id" not in result.meta
    assert result.content.endswith(
        f"[truncated at {TOOL_RESULT_LIMIT} bytes: the last {100_000 - TOOL_RESULT_LIMIT:,} of "
        "100,000 bytes of this result were cut]")
    assert result.content.startswith(blob_text(TOOL_RESULT_LIMIT))
    assert (await rt.transcript(conv))[-1].content == "nothing to page"


def skipped_events(events: list[Any]) -> list[dict[str, Any]]:
    return [dict(e.data) for e in events if e.type == "mcp_tool_skipped"]


async def test_b17_a_malformed_tool_is_skipped_with_a_warning_and_a_feed_event(
    runtimes: RuntimeFactory, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "tidings.mcp")
    rt = await runtimes(
        models=[ScriptedModel(rules=calling("raw.hello", {"name": "Ada"}, when="hello?"))],
        config=RuntimeConfig(mcp_servers=(stdio(RAW_LISTING, "raw"),)))
    assert {n for n in rt.tools.names() if n.startswith("raw.")} == {"raw.hello"}
    def warned(tool: str) -> list[str]:
        return [
            r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and repr(tool) in r.getMessage()]
    assert len(warned("string_schema")) == 1
    assert len(warned("no_schema")) == 1
    assert "inputSchema" in warned("string_schema")[0]
    # The log line counts what is offered.
    (connected,) = [r.getMessage() for r in caplog.records if "connected" in r.getMessage()]
    assert connected.endswith(": 1 tools, 2 skipped"), connected

    conv = await conversation(rt, "raw.hello")
    (result,) = await turn(rt, conv, "hello?")
    assert (result.meta["is_error"], result.content) == (False, "hello Ada")
    events = skipped_events(await rt.events(conv))
    assert sorted(e["tool"] for e in events) == ["no_schema", "string_schema"]
    assert all(e["server"] == "raw" and "inputSchema" in e["reason"] for e in events)

    # Told once: a second call says nothing more.
    await turn(rt, conv, "hello?")
    assert len(skipped_events(await rt.events(conv))) == 2
    # A conversation that never called the server hears nothing.
    other = await conversation(rt, "raw.hello")
    assert skipped_events(await rt.events(other)) == []


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_b17_the_server_sees_the_client_as_tidings_with_its_version(
    runtimes: RuntimeFactory, transport: str,
) -> None:
    async def whoami(server: MCPServer) -> str:
        rt = await runtimes(models=[ScriptedModel(rules=[])],
                            config=RuntimeConfig(mcp_servers=(server,)))
        output = await rt.mcp["bulky"].call("whoami", {})
        assert not output.is_error, output.content
        return output.content

    if transport == "http":
        with served(BULKY, "bulky") as server:
            seen = await whoami(server)
    else:
        seen = await whoami(stdio(BULKY, "bulky"))
    assert seen == f"tidings {version('tidings')}"
