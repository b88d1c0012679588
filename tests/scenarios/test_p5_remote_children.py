"""P5: a remote A2A agent (tests/a2a_agents/remote.py: the ``a2a-sdk``'s own server classes, in
a process of its own on loopback) as tidings' remote child, both backends: the parent's turn
spawns it with ``agent``, the remote answers, and the parent gets the answer once as ``child``
mail that a turn reads; a remote failure and a task the remote forgets (``lost``), batched; a
stop of the parent's run cancels the remote task; a remote question reaches the parent, and
its answer by ``send`` continues the same remote task. The agent's card says it streams: its
tasks are watched by ``SubscribeToTask`` (the answer test polls only once a minute, so the
stream is what sees the end); the failure test's agent does not stream, so it is polled."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.a2a_agents import TOKEN, TOKEN_ENV, cancelled, received, remote_agent
from tests.conftest import Backend
from tests.waiting import eventually
from tidings import Origin, Profile, RemoteAgent, Rule, Runtime, ScriptedModel
from tidings.mail.child_requests import ChildRequest
from tidings.types import Message, RunStatus, StartKind

WITHIN_S = 15.0


def spawning(*briefs: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "spawn", "arguments": {"agent": "helper", "brief": b}}
                           for b in briefs]}


@contextlib.asynccontextmanager
async def parent(backend: Backend, agent: RemoteAgent, rules: list[Rule]
                 ) -> AsyncIterator[tuple[Runtime, str]]:
    rules.append(Rule({"tool_result": "spawn"}, {"text": "Delegated."}))
    model = ScriptedModel(rules=rules, default={"text": "ok"})  # the same list: a test adds
    async with Runtime.open(backend.url, models=[model], agents=[agent]) as rt:
        conv = (await rt.create_conversation(
            "alice", Profile(model="scripted", tools=("spawn", "send")))).conversation_id
        yield rt, conv


async def settled_on(rt: Runtime, conv: str, last: str) -> list[Message]:
    async def transcript() -> list[Message]:
        await rt.settle(conv)
        return await rt.transcript(conv)
    return await eventually(transcript, lambda ms: bool(ms) and ms[-1].content == last,
                            what=f"the parent's answer {last!r}", within_s=WITHIN_S)


def child_mail(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("origin") == Origin.CHILD.value
            or "<task_result" in m.content]


async def requests(rt: Runtime, conv: str) -> list[ChildRequest]:
    return await rt.children.list(conv)


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


async def test_p5_a_remote_child_answers_once_as_child_mail(backend: Backend,
                                                            tmp_path: Path) -> None:
    with remote_agent(tmp_path, poll=timedelta(minutes=1)) as agent:
        async with parent(backend, agent, [
            Rule({"text_equals": "go"}, spawning("summarise the news")),
            Rule({"text_contains": "done: summarise the news"}, {"text": "Read it."}),
        ]) as (rt, conv):
            await rt.post(conv, "go")
            messages = await settled_on(rt, conv, "Read it.")
            [request] = await requests(rt, conv)
            runs = await rt.runs.list(conv)
    assert received(tmp_path) == ["summarise the news"]  # the brief, sent once, with its token
    [mail] = child_mail(messages)
    assert mail.content == (f'<task_result task="{request.task_key}" status="completed" '
                            f'conversation="{request.child_conversation_id}">done: summarise '
                            "the news</task_result>")
    assert (request.state, request.reply_status, request.relayed) == ("replied", "completed",
                                                                       True)
    assert [(r.trigger, r.status) for r in runs] == [
        (StartKind.PERSON, RunStatus.COMPLETED), (StartKind.MAIL, RunStatus.COMPLETED)]


async def test_p5_a_remote_failure_and_a_forgotten_task_are_failed_and_lost(
    backend: Backend, tmp_path: Path,
) -> None:
    with remote_agent(tmp_path, streaming=False) as agent:
        async with parent(backend, agent, [
            Rule({"text_equals": "go"}, spawning("fail this", "forget this")),
            Rule({"text_contains": "<task_result"}, {"text": "Noted."}),
        ]) as (rt, conv):
            await rt.post(conv, "go")

            async def replied() -> list[ChildRequest]:
                return await requests(rt, conv)
            done = await eventually(replied, lambda rs: len(rs) == 2 and all(r.relayed for r in rs),
                                    what="both replies relayed", within_s=WITHIN_S)
            messages = await settled_on(rt, conv, "Noted.")
    statuses = {r.reply_status: r.reply or "" for r in done}
    assert set(statuses) == {"failed", "lost"}
    assert "failed: no such thing" in statuses["failed"]
    assert "no longer knows task" in statuses["lost"]
    mails = child_mail(messages)
    assert sorted(m.content.count("<task_result") for m in mails) in ([2], [1, 1])
    assert sum(m.content.count("<task_result") for m in mails) == 2  # each once


async def test_p5_stopping_the_parents_run_cancels_the_remote_task(backend: Backend,
                                                                   tmp_path: Path) -> None:
    with remote_agent(tmp_path) as agent:
        async with parent(backend, agent, [
            Rule({"text_equals": "go"}, spawning("slow work")),
        ]) as (rt, conv):
            await rt.post(conv, "go")
            await settled_on(rt, conv, "Delegated.")
            [run, *_] = await rt.runs.list(conv)
            await eventually(lambda: _received(tmp_path), bool, what="the brief received",
                             within_s=WITHIN_S)
            await rt.runs.stop(conv, run.run_id)
            await eventually(lambda: _cancelled(tmp_path), bool, what="the remote's cancel",
                             within_s=WITHIN_S)
            (tmp_path / "release").touch()  # were it not cancelled, it would answer now
            [request] = await requests(rt, conv)

            async def following() -> tuple[str, ...]:
                return rt.remote_children.following()
            await eventually(following, lambda f: f == (), what="no longer followed",
                             within_s=WITHIN_S)
            messages = await rt.transcript(conv)
    assert request.state == "cancelled"
    assert not child_mail(messages)


async def test_p5_a_remote_question_reaches_the_parent_and_send_answers_it(
    backend: Backend, tmp_path: Path,
) -> None:
    rules = [Rule({"text_equals": "go"}, spawning("ask me"))]
    with remote_agent(tmp_path) as agent:
        async with parent(backend, agent, rules) as (rt, conv):
            await rt.post(conv, "go")

            async def asked() -> list[ChildRequest]:
                return await requests(rt, conv)
            [question] = await eventually(asked, lambda rs: bool(rs) and rs[0].relayed,
                                          what="the question relayed", within_s=WITHIN_S)
            assert question.reply_status == "input_required"
            assert "which colour?" in (question.reply or "")
            rules.insert(0, Rule({"text_equals": "blue"}, {"tool_calls": [{
                "name": "send", "arguments": {"conversation": question.child_conversation_id,
                                              "message": "blue"}}]}))
            rules.insert(0, Rule({"text_contains": "painted blue"}, {"text": "Painted."}))
            rules.insert(0, Rule({"tool_result": "send"}, {"text": "Answered."}))
            await rt.post(conv, "blue")
            messages = await settled_on(rt, conv, "Painted.")
            answered = await requests(rt, conv)
    assert received(tmp_path) == ["ask me", "blue"]
    assert [(r.kind, r.reply_status) for r in answered] == [("spawn", "input_required"),
                                                             ("send", "completed")]
    assert len(child_mail(messages)) == 2


async def _received(state: Path) -> list[str]:
    return received(state)


async def _cancelled(state: Path) -> list[str]:
    return cancelled(state)
