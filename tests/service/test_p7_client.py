"""P7: the Python client (``tidings.Client``) against ``tidings serve`` in a process of its own,
on loopback: every method on both backends, typed with the service's models and raising the
library's errors; the feed resumed with Last-Event-ID across a server restart; docs/api.md's
example as written."""

from __future__ import annotations

import asyncio
import re
import sys
from contextlib import aclosing
from pathlib import Path

import httpx
import pytest

import tidings
from tests.conftest import Backend
from tests.service.test_cli import ENV, WAIT_S, Served, served
from tests.waiting import eventually, wait_until
from tidings.client import FeedLost, FeedResumed, ServiceError
from tidings.service.schemas import AnswerOut, EventOut, InputOut

CONFIG = """
[models.echo]
provider = "scripted"

[[models.echo.rules]]
when = { text_contains = "fail now" }
reply = { error = "permanent" }

[[models.echo.rules]]
when = { text_contains = "in the background" }
[[models.echo.rules.reply.tool_calls]]
name = "shell"
arguments = { command = "printf 'done here'", background = true }

[[models.echo.rules]]
when = { text_contains = "run it" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "true" } }] }

[[models.echo.rules]]
when = { meta_kind = "task_notification" }
reply = { text = "The task ended." }

[[models.echo.rules]]
when = { tool_result = "shell" }
reply = { text = "Ran it." }

[profiles.helper]
model = "echo"
tools = ["shell"]
"""

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


async def test_p7_client_every_method(backend: Backend, tmp_path: Path) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text(CONFIG, "utf-8")
    with served(backend.url, "--config", str(config), "--token", "alice=tok-a",
                "--operator-token", "tok-op",
                env={"TIDINGS_MASTER_KEY": "ab" * 32}) as server:  # results are sealed
        async with tidings.Client(server.url, "tok-a") as client:
            made = await client.create("helper", title="walk")  # a configured profile's name
            conv = made.conversation_id
            assert (made.title, made.profile.model, made.status) == ("walk", "echo", "active")
            assert (await client.conversation(conv)).title == "walk"
            assert [c.conversation_id for c in (await client.conversations.list()).items] == [conv]

            answer = await client.post(conv, "hello", wait=WAIT_S)
            assert isinstance(answer, AnswerOut)
            assert (answer.status, answer.reply, answer.timed_out) == ("completed", "hello", False)
            assert answer.run is not None
            queued = await client.post(conv, "and again", idempotency_key="k1")
            assert isinstance(queued, InputOut)
            again = await client.post(conv, "and again", idempotency_key="k1")
            assert again.input_id == queued.input_id
            assert queued.input_id in [i.input_id for i in await client.inputs.list(conv)]

            page = await client.transcript(conv)
            assert [m.content for m in page.items][:2] == ["hello", "hello"]
            # The queued input's turn may have run since: the next page holds only what is new.
            rest = await client.transcript(conv, page.next_after_seq)
            assert all(m.seq > page.items[-1].seq for m in rest.items)
            events = await client.events(conv)
            assert events.items[0].type == "conversation_created"

            async with aclosing(client.watch(conv, after_seq=0)) as feed:
                first = await anext(feed)
            assert first == events.items[0]

            runs = await client.runs.list(conv)
            assert answer.run.run_id in [r.run_id for r in runs]
            assert (await client.runs.get(conv, answer.run.run_id)).status == "completed"
            assert (await client.runs.stop(conv, answer.run.run_id)).cancelled_inputs == []
            failed = await client.post(conv, "fail now", wait=WAIT_S)
            assert failed.status == "failed"
            assert failed.run is not None
            retried = await client.runs.retry(conv, failed.run.run_id)
            assert retried.conversation_id == conv

            ran = await client.post(conv, "run it in the background", wait=WAIT_S)
            assert ran.reply == "Ran it."
            tasks = await eventually(lambda: client.tasks.list(conv),
                                     lambda page: page.items and page.items[0].result_id,
                                     what="the background task's result")
            task = tasks.items[0]
            assert (await client.tasks.get(conv, task.task_key)).result_id == task.result_id
            [ref] = (await client.results.list(conv)).items
            assert ref.result_id == task.result_id
            texts: list[str] = []
            offset: int | None = 0
            while offset is not None:
                part = await client.results.page(conv, ref.result_id, offset=offset,
                                                 limit_bytes=4)
                texts.append(part.text)
                offset = part.next_offset
            assert "".join(texts) == "done here"

            careful = await client.create({"model": "echo"})
            changed = await client.conversations.set_profile(careful.conversation_id, {
                "model": "echo", "tools": ["shell"], "approval_mode": "always"})
            assert changed.profile.approval_mode == "always"
            held = await client.post(careful.conversation_id, "run it", wait=WAIT_S)
            assert held.status == "awaiting_approval"
            [pending] = await client.approvals.list(careful.conversation_id, status="pending")
            decided = await client.approvals.decide(careful.conversation_id, pending.approval_id,
                                                    approve=True)
            assert (decided.status, decided.decided_by) == ("approved", "alice")

            assert await client.questions.list(conv) == []
            with pytest.raises(tidings.UnknownQuestionError):
                await client.questions.answer(conv, "q_nope", "decline")

            goal = await client.conversations.set_goal(conv, "active", "finish the walk")
            assert (goal.goal_status, goal.goal_text) == ("active", "finish the walk")
            await client.conversations.checkpoint(conv)
            assert isinstance((await client.stop(conv)).run_ids, list)

            assert (await client.conversations.archive(conv)).status == "archived"
            with pytest.raises(tidings.ConversationClosedError):
                await client.post(conv, "too late")
            assert (await client.conversations.unarchive(conv)).status == "active"
            assert (await client.post(conv, "back again", wait=WAIT_S)).reply == "back again"
            assert (await client.signals.stats(conv)).conversation_id == conv
            with pytest.raises(tidings.UnknownConversationError) as unknown:
                await client.transcript("conv_nope")
            assert "conv_nope" in unknown.value.message
            with pytest.raises(tidings.UnknownConversationError):
                await anext(client.watch("conv_nope"))
            with pytest.raises(tidings.UnknownProfileError):
                await client.create("nobody")
        async with tidings.Client(server.url, "tok-op") as operator:
            assert (await operator.signals.stats()).conversation_id is None
            assert await operator.signals.dead_letters() == []
            assert await operator.signals.push_dead_letters() == []
            [instance] = await operator.instances()
            assert (instance.state, instance.serving) == ("live", True)
        async with tidings.Client(server.url, "tok-a") as alice:
            with pytest.raises(ServiceError) as forbidden:
                await alice.instances()
            assert forbidden.value.status == 403
        async with tidings.Client(server.url, "wrong") as stranger:
            with pytest.raises(ServiceError) as refused:
                await stranger.conversation(conv)
            assert (refused.value.code, refused.value.status) == ("unauthorized", 401)


async def test_p7_watch_resumes_across_a_server_restart(tmp_path: Path) -> None:
    database = str(tmp_path / "restart.db")
    first = await asyncio.to_thread(Served(database, "--token", "alice=tok-a").wait_ready)
    try:
        # The docs' example, as written but for its port: it runs against this server.
        example = re.search(r"## From Python: tidings.Client\n.*?```python\n(.*?)```",
                            DOCS.read_text("utf-8"), re.S)
        assert example is not None
        program = example.group(1).replace("http://127.0.0.1:8080", first.url)
        ran = await asyncio.create_subprocess_exec(
            sys.executable, "-c", program, env=ENV,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(ran.communicate(), WAIT_S)
        assert ran.returncode == 0, err.decode()
        assert out.decode().startswith("completed hello\n1 conversation_created\n"), out
        assert out.decode().endswith("unknown_conversation\n"), out

        async with tidings.Client(first.url, "tok-a", max_reconnect_delay_s=0.2) as client:
            conv = (await client.create({"model": "scripted"})).conversation_id
            seen: list[EventOut | FeedLost | FeedResumed] = []
            after: list[str] = []

            async def follow() -> None:
                async for item in client.watch(conv, notices=True):
                    seen.append(item)
                    if isinstance(item, EventOut) and item.type == "input_materialized" and \
                            item.data.get("input_id") in after:
                        return

            watcher = asyncio.create_task(follow())
            await client.post(conv, "before", wait=WAIT_S)
            assert await asyncio.to_thread(first.stop) == 0
            second = await asyncio.to_thread(
                Served(database, "--token", "alice=tok-a", port=first.port).wait_ready)
            try:
                posted = await client.post(conv, "after")
                after.append(posted.input_id)
                await asyncio.wait_for(watcher, WAIT_S)
            finally:
                second.kill()
        events = [e for e in seen if isinstance(e, EventOut) and e.seq is not None]
        # Every journal row once, in order, across the restart: nothing lost, nothing twice.
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        lost = [i for i, e in enumerate(seen) if isinstance(e, FeedLost)]
        resumed = [i for i, e in enumerate(seen) if isinstance(e, FeedResumed)]
        assert lost, seen
        assert resumed, seen
        assert lost[0] < resumed[0], seen
    finally:
        first.kill()


async def test_p7_client_post_refused_then_posts_again(backend: Backend) -> None:
    """Each post leaves in one piece; a refused one is still answered -- a body over the
    service's limit (413, refused before the service read it all), an unknown conversation, a
    wrong token -- and the same client posts again, waiting for the answer."""
    with served(backend.url, "--token", "alice=tok-a", "--model", "scripted") as server:
        async with tidings.Client(server.url, "tok-a") as client:
            conv = (await client.create({"model": "scripted"})).conversation_id
            with pytest.raises(tidings.PayloadTooLargeError):
                await client.post(conv, "x" * 300_000, wait=WAIT_S)
            with pytest.raises(tidings.UnknownConversationError):
                await client.post("conv_nope", "hello", wait=WAIT_S)
            answer = await client.post(conv, "héllo again", wait=WAIT_S)
            assert (answer.status, answer.reply) == ("completed", "héllo again")
            assert [i.content for i in await client.inputs.list(conv)] == ["héllo again"]
        async with tidings.Client(server.url, "wrong") as stranger:
            with pytest.raises(ServiceError) as refused:
                await stranger.post(conv, "hello", wait=WAIT_S)
            assert (refused.value.code, refused.value.status) == ("unauthorized", 401)


HELD = """
[models.held]
provider = "scripted"

[[models.held.rules]]
when = { text_contains = "run it" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "true" } }] }

[[models.held.rules]]
when = { tool_result = "shell" }
reply = { text = "Ran it." }

[profiles.careful]
model = "held"
tools = ["shell"]
approval_mode = "always"
"""


async def test_p7_posts_at_once_through_one_client_each_get_their_own_answer(
    backend: Backend,
) -> None:
    """Posts made together share the client's kept-alive connections, one request at a time
    on each: every caller gets the answer to its own input."""
    with served(backend.url, "--token", "alice=tok-a", "--model", "scripted") as server:
        async with tidings.Client(server.url, "tok-a") as client:
            convs = [(await client.create({"model": "scripted"})).conversation_id
                     for _ in range(12)]
            for round_ in range(3):
                answers = await asyncio.gather(*(
                    client.post(conv, f"words {round_} for {conv}", wait=WAIT_S)
                    for conv in convs))
                for conv, answer in zip(convs, answers, strict=True):
                    assert (answer.status, answer.reply) == (
                        "completed", f"words {round_} for {conv}")
                    assert answer.input.conversation_id == conv


async def test_p7_a_post_given_up_leaves_nothing_for_the_next_post_to_misread(
    backend: Backend, tmp_path: Path,
) -> None:
    """A caller that stops waiting (its task cancelled) while the service still holds its post:
    the next post -- on the same client, at once -- gets its own answer, not the late answer to
    the one given up."""
    config = tmp_path / "tidings.toml"
    config.write_text(HELD, "utf-8")
    with served(backend.url, "--config", str(config), "--token", "alice=tok-a") as server:
        async with tidings.Client(server.url, "tok-a") as client:
            held = (await client.create("careful")).conversation_id
            plain = (await client.create({"model": "held"})).conversation_id
            holding = await client.post(held, "run it", wait=WAIT_S)  # waits for a decision
            assert holding.status == "awaiting_approval"
            # Queued behind the held run, this post's answer is seconds away.
            waiting = asyncio.create_task(client.post(held, "later words", wait=3))
            await wait_until(lambda: _queued(server.url, held),
                             what="the second post was taken and queued")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            answer = await client.post(plain, "my own words", wait=WAIT_S)
            assert (answer.status, answer.reply) == ("completed", "my own words")
            assert answer.input.conversation_id == plain


def _queued(url: str, conv: str) -> bool:
    found = httpx.get(f"{url}/v1/conversations/{conv}/inputs",
                      headers={"Authorization": "Bearer tok-a"}, timeout=WAIT_S)
    return found.status_code == 200 and any(
        i["content"] == "later words" for i in found.json()["items"])


def test_p7_a_post_after_the_service_restarted_goes_through(tmp_path: Path) -> None:
    """The service restarted (on the same port) while the client held an idle connection to
    it, and the client's loop did not run meanwhile: the next post opens a new connection
    rather than fail on the dead one."""
    database = str(tmp_path / "restart.db")
    first = Served(database, "--token", "alice=tok-a", "--model", "scripted").wait_ready()
    second: Served | None = None
    try:
        with asyncio.Runner() as runner:
            client = tidings.Client(first.url, "tok-a")
            conv = runner.run(client.create({"model": "scripted"})).conversation_id
            assert runner.run(client.post(conv, "before", wait=WAIT_S)).reply == "before"
            # Stopped and started again with the loop idle: the closed connection is unread.
            assert first.stop() == 0
            second = Served(database, "--token", "alice=tok-a", "--model", "scripted",
                            port=first.port).wait_ready()
            after = runner.run(client.post(conv, "after", wait=WAIT_S))
            assert (after.status, after.reply) == ("completed", "after")
            runner.run(client.aclose())
    finally:
        first.kill()
        if second is not None:
            second.kill()
