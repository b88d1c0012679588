"""R1, T1, T10, R3 through the runtime, with real processes on both backends: nothing a
background task writes is cut silently.

Up to the result envelope's bound (2 MiB) a task's output -- stdout, then stderr -- is stored
whole and pages back whole through ``task_output`` / ``tool_result_get``, each page whole code
points and small enough to reach the model uncut. Beyond the bound the stored result is
``truncated``: it keeps the head and the tail of what did not fit, with a statement in place of
what was dropped, and the result, the notice (or the wait's report) and every page say how
many bytes of which stream were dropped, and where. The notice's excerpt marks its elisions.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import RuntimeFactory
from tests.waiting import eventually
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, ToolCall
from tidings.records.results import Drop, MasterKey
from tidings.runtime.root import Runtime
from tidings.tasks.capture import STDERR_SEPARATOR
from tidings.tasks.notify import NOTIFICATION_KIND
from tidings.tools.registry import TOOL_RESULT_LIMIT, ToolContext, ToolOutput
from tidings.types import ConversationId, Message, Profile, RunId

MIB = 1024 * 1024
READ = "I have read the output."

PATTERN = '''
def pattern(lines, tag):
    return b"".join(("%07d %s \\u00e9\\u2713\\n" % (i, tag)).encode() for i in range(lines))
'''
namespace: dict[str, Any] = {}
exec(PATTERN, namespace)  # the test and the process write the same bytes
pattern: Callable[[int, str], bytes] = namespace["pattern"]
LINE = len(pattern(1, "out"))  # 18 bytes, two of its characters more than one byte long


def writer(tmp_path: Path, out_lines: int, err_lines: int) -> str:
    """A shell command that writes ``pattern(out_lines, "out")`` to stdout and
    ``pattern(err_lines, "err")`` to stderr."""
    script = tmp_path / f"write_{out_lines}_{err_lines}.py"
    script.write_text(
        "import sys\n" + PATTERN
        + f"sys.stdout.buffer.write(pattern({out_lines}, 'out'))\n"
        + f"sys.stderr.buffer.write(pattern({err_lines}, 'err'))\n"
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


class Reader:
    """Starts the command it is given in the background; when told of its end, reads the
    task's output page by page (``pages`` of them at most), then answers."""

    name = "reader"

    def __init__(self, pages: int = 1_000) -> None:
        self.pages = pages

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        newest = request.messages[-1]
        if newest.role == "user" and newest.meta.get("kind") == NOTIFICATION_KIND:
            return self._read(str(newest.meta["task_key"]), 0)
        if newest.role == "user":
            return ModelReply("", (ToolCall("c1", "shell", {
                "command": newest.content, "background": True}),))
        if newest.tool_name == "task_output":
            page = json.loads(newest.content)
            read = sum(1 for m in request.messages if m.tool_name == "task_output")
            if page["next_offset"] is not None and read < self.pages:
                key = next(str(m.meta["task_key"]) for m in request.messages
                           if m.meta.get("kind") == NOTIFICATION_KIND)
                return self._read(key, page["next_offset"])
            return ModelReply(READ)
        return ModelReply("Started.")

    def _read(self, task_key: str, offset: int) -> ModelReply:
        return ModelReply("", (ToolCall(f"read-{offset}", "task_output", {
            "task_key": task_key, "offset": offset}),))


class Waiter:
    """Starts the command in the background and waits for it (so no notice follows, T8)."""

    name = "waiter"

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        newest = request.messages[-1]
        if newest.role == "user":
            return ModelReply("", (ToolCall("c1", "shell", {
                "command": newest.content, "background": True}),))
        if newest.tool_name == "shell":
            key = re.search(r"task (bg-[0-9a-f]+)", newest.content)
            assert key is not None
            return ModelReply("", (ToolCall("c2", "wait", {
                "task_key": key.group(1), "timeout_s": 30}),))
        return ModelReply("Waited.")


async def run_to(rt: Runtime, conv: str, text: str, last: str) -> list[Message]:
    await rt.post(conv, text)

    async def answered() -> bool:
        await rt.settle(conv)
        messages = await rt.transcript(conv)
        return messages[-1].role == "assistant" and messages[-1].content == last

    await eventually(answered, what=f"the answer {last!r}", within_s=60, poll_s=0.05)
    return await rt.transcript(conv)


async def open_reader(runtimes: RuntimeFactory, model: Reader | Waiter) -> tuple[Runtime, str]:
    rt = await runtimes(models=[model], master_key=MasterKey.generate())
    profile = Profile(model=model.name, tools=("shell", "task_output", "wait"))
    return rt, (await rt.create_conversation("alice", profile)).conversation_id


def the_note(messages: list[Message]) -> Message:
    [note] = [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]
    return note


def process_facts(note: Message) -> dict[str, Any]:
    found = re.search(r"<process_facts>(.*)</process_facts>", note.content)
    assert found is not None
    facts: dict[str, Any] = json.loads(found.group(1))
    return facts


def fenced_excerpt(note: Message) -> tuple[str, str]:
    found = re.search(r"<untrusted_process_output ([^>]*)>(.*)</untrusted_process_output>",
                      note.content)
    assert found is not None
    return found.group(1), json.loads(found.group(2))


async def test_r1_200_kb_of_output_is_stored_whole_and_pages_back_whole(
    runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    rt, conv = await open_reader(runtimes, Reader())
    out, err = pattern(11_112, "out"), pattern(3, "err")
    assert len(out) > 200_000
    messages = await run_to(rt, conv, writer(tmp_path, 11_112, 3), READ)
    whole = out + STDERR_SEPARATOR + err  # stdout, then a [stderr] line and stderr

    note = the_note(messages)
    ref, data = await rt.results.get(conv, note.meta["result_id"])
    assert data == whole
    assert (ref.status, ref.dropped, ref.size_bytes) == ("stored", (), len(whole))
    facts = process_facts(note)
    assert (facts["stdout_bytes"], facts["stderr_bytes"]) == (len(out), len(err))
    assert "output_dropped" not in facts  # nothing was dropped, and nothing says so
    # The notice's excerpt is bounded and marks where it leaves output out.
    attributes, shown = fenced_excerpt(note)
    assert "truncated=true" in attributes
    assert len(shown.encode()) <= 2048
    assert shown.startswith(out[:500].decode())
    omitted = re.search(r"\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n", shown)
    assert omitted is not None
    assert shown.endswith(STDERR_SEPARATOR.decode() + err.decode())  # small stderr: whole

    # The model paged through all of it: every page whole code points, none cut on its way.
    pages = [m for m in messages if m.tool_name == "task_output"]
    assert len(pages) >= 4
    texts = []
    for message in pages:
        assert len(message.content.encode()) <= TOOL_RESULT_LIMIT
        page = json.loads(message.content)
        assert page["status"] == "stored"
        assert "dropped" not in page
        assert "\ufffd" not in page["text"]
        texts.append(page["text"])
    assert json.loads(pages[-1].content)["next_offset"] is None
    assert "".join(texts).encode() == whole

    # tool_result_get reads the same pages of the same result.
    tool = rt.tools.get("tool_result_get")
    assert tool is not None
    context = ToolContext(ConversationId(conv), RunId("run_test"), "call_test")
    got = await tool.handler(context, {"result_id": ref.result_id, "offset": 0})
    assert isinstance(got, ToolOutput)
    assert json.loads(got.content)["text"] == texts[0]


async def test_r1_3_mib_of_stdout_is_bounded_and_the_result_and_notice_say_what_was_dropped(
    runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    lines = 3 * MIB // LINE
    out = pattern(lines, "out")
    rt, conv = await open_reader(runtimes, Reader(pages=1))
    messages = await run_to(rt, conv, writer(tmp_path, lines, 0), READ)
    note = the_note(messages)

    # The result: bounded, truncated (not "stored"), and it says what is missing and where.
    ref, data = await rt.results.get(conv, note.meta["result_id"])
    assert ref.status == "truncated"
    [drop] = ref.dropped
    assert drop.stream == "stdout"
    assert len(data) <= 2 * MIB
    assert drop.dropped_bytes == len(out) - (len(data) - len(marker(drop)))
    assert 0 < drop.from_byte < drop.to_byte < len(out)
    assert data == out[: drop.from_byte] + marker(drop) + out[drop.to_byte :]
    assert f"dropped {drop.dropped_bytes:,} bytes of stdout between byte {drop.from_byte:,} " \
           f"and byte {drop.to_byte:,}" in data.decode()
    data.decode("utf-8")  # cut on code point boundaries
    [listed] = await rt.results.list(conv)
    assert (listed.status, listed.dropped) == ("truncated", (drop,))

    # The notice states the drop among the runtime's facts, not only in the output.
    facts = process_facts(note)
    assert facts["stdout_bytes"] == len(out)
    assert facts["output_dropped"] == [f"the stored result {drop.statement()}"]
    assert note.meta["output_dropped_bytes"] == drop.dropped_bytes
    attributes, shown = fenced_excerpt(note)
    assert "truncated=true" in attributes
    omitted = re.search(r"\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n", shown)
    assert omitted is not None
    assert int(omitted.group(1)) == len(out) - len(shown.encode()) + len(omitted.group(0))

    # A page says it too.
    [page_message] = [m for m in messages if m.tool_name == "task_output"]
    page = json.loads(page_message.content)
    assert page["status"] == "truncated"
    assert page["dropped"] == [drop.statement()]


async def test_r1_stderr_shares_the_bound_and_its_drop_is_stated_too(
    runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    out_lines, err_lines = 20_000, 3 * MIB // LINE
    out, err = pattern(out_lines, "out"), pattern(err_lines, "err")
    rt, conv = await open_reader(runtimes, Reader(pages=1))
    messages = await run_to(rt, conv, writer(tmp_path, out_lines, err_lines), READ)
    note = the_note(messages)

    ref, data = await rt.results.get(conv, note.meta["result_id"])
    assert ref.status == "truncated"
    [drop] = ref.dropped  # stdout fitted its share: whole; stderr kept its head and tail
    assert drop.stream == "stderr"
    assert len(data) <= 2 * MIB
    assert data == (out + STDERR_SEPARATOR + err[: drop.from_byte] + marker(drop)
                    + err[drop.to_byte :])
    facts = process_facts(note)
    assert (facts["stdout_bytes"], facts["stderr_bytes"]) == (len(out), len(err))
    assert facts["output_dropped"] == [f"the stored result {drop.statement()}"]
    _, shown = fenced_excerpt(note)
    stdout_part, stderr_part = shown.split(STDERR_SEPARATOR.decode())
    assert "bytes omitted" in stdout_part
    assert "bytes omitted" in stderr_part
    assert stderr_part.endswith(err[-100:].decode())


async def test_r1_a_waited_for_task_reports_its_drop_in_the_wait_result(
    runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    """The model read the end in the wait's result, so no notice follows (T8): that result
    is where the drop must be stated."""
    lines = 3 * MIB // LINE
    rt, conv = await open_reader(runtimes, Waiter())
    messages = await run_to(rt, conv, writer(tmp_path, lines, 0), "Waited.")
    [waited] = [m for m in messages if m.tool_name == "wait"]
    facts = json.loads(waited.content)
    assert facts["state"] == "exited"
    ref, _ = await rt.results.get(conv, facts["result_id"])
    [drop] = ref.dropped
    assert facts["output_dropped"] == [f"the stored result {drop.statement()}"]
    assert [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND] == []


async def test_r1_foreground_shell_shows_stderr_and_says_when_it_cut(
    runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    class Foreground:
        name = "foreground"

        async def complete(
            self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
        ) -> ModelReply:
            newest = request.messages[-1]
            if newest.role == "user":
                return ModelReply("", (ToolCall("c1", "shell", {"command": newest.content}),))
            return ModelReply("Done.")

    rt = await runtimes(models=[Foreground()])
    conv = (await rt.create_conversation(
        "alice", Profile(model="foreground", tools=("shell",)))).conversation_id
    out, err = pattern(6_000, "out"), pattern(2, "err")
    messages = await run_to(rt, conv, writer(tmp_path, 6_000, 2), "Done.")
    [result] = [m for m in messages if m.role == "tool"]
    assert result.content.startswith("exit 0\n")
    assert result.content.endswith("]")
    body, note = result.content.rsplit("\n[output shortened", 1)
    assert f"{len(out):,} bytes to stdout and {len(err):,} to stderr" in note
    assert "background: true" in note
    assert "bytes omitted" in body
    assert body.endswith(STDERR_SEPARATOR.decode() + err.decode())  # the error is shown

    # What fits is shown whole, and says nothing was cut.
    small = await run_to(rt, conv, writer(tmp_path, 3, 1), "Done.")
    [*_, last] = [m for m in small if m.role == "tool"]
    assert last.content == "exit 0\n" + (pattern(3, "out") + STDERR_SEPARATOR
                                         + pattern(1, "err")).decode()


def marker(drop: Drop) -> bytes:
    return f"\n[... {drop.statement()} ...]\n".encode()
