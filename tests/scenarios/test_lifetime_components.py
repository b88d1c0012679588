"""S9 through the runtime: its long-lived parts own their lifetime. The coordinator, the
answers, the task ends, the supervisor, the webhook worker, the instance's heartbeat and the
feed hub are the components the runtime's task group runs -- no adapter around them -- and stop
in that order, each once, whether they ever ran (a runtime closed while locked) or not."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from tests.conftest import Backend
from tests.waiting import wait_until
from tidings.errors import SupervisorClosedError
from tidings.models.scripted import ScriptedModel
from tidings.runtime.root import Runtime
from tidings.support.lifetime import Loop
from tidings.tasks.supervisor import ProcessSpec
from tidings.types import Profile

MODEL = ScriptedModel(rules=[], default={"text": "ok"})
OWN = ("tidings-coordinator", "tidings-answers", "tidings-task-ends", "tidings-supervisor",
       "tidings-webhooks", "tidings-outbox", "tidings-feed")
"""The components that own their lifetime, in the order the runtime stops them."""
STOPS = [f"{name} {hook}" for name in OWN for hook in ("stopping", "stopped")]


def _own(rt: Runtime) -> list[Loop]:
    return [rt.coordinator, rt.answers, rt.background.ends, rt.supervisor, rt.webhooks,
            rt.instance, rt.feed]


def _record(rt: Runtime) -> list[str]:
    """Record each hook of the seven as the runtime's shutdown calls it; the supervisor's close
    also records whether the task ends were closed before it."""
    log: list[str] = []

    def wrap(name: str, hook: str,
             call: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def recorded() -> None:
            log.append(f"{name} {hook}")
            await call()
        return recorded

    for component in _own(rt):
        for hook in ("stopping", "stopped"):
            setattr(component, hook, wrap(component.name, hook, getattr(component, hook)))
    close = rt.supervisor.close

    async def closing_supervisor(grace: timedelta | None = None) -> None:
        log.append("ends closed" if rt.background.ends._closing.is_set() else "ends open")
        await close(grace)

    rt.supervisor.close = closing_supervisor  # type: ignore[method-assign]
    return log


def _assert_shut(rt: Runtime) -> None:
    assert not rt.instance.running  # retired
    assert not rt.coordinator.active("anything")
    assert rt.answers.waiting == 0


async def test_s9_the_runtime_runs_its_own_components_and_stops_them_in_order(
    backend: Backend,
) -> None:
    async with Runtime.open(backend.url, models=[MODEL]) as rt:
        by_name = {component.name: component for component in rt.lifetime.components}
        assert [by_name[name] for name in OWN] == _own(rt)  # the objects themselves
        assert [c.name for c in rt.lifetime.components if c.name in OWN] == list(OWN)
        await wait_until(lambda: set(OWN) <= {t.get_name() for t in asyncio.all_tasks()},
                         what="each one's run() under way")
        conv = await rt.create_conversation("alice", Profile(model="scripted"))
        answer = await rt.post(conv.conversation_id, "hello", wait=True)
        assert answer.reply == "ok"
        log = _record(rt)
    supervisor = STOPS.index("tidings-supervisor stopped")
    assert log == [*STOPS[:supervisor], "ends closed", *STOPS[supervisor:]]
    assert not {t.get_name() for t in asyncio.all_tasks()} & set(OWN)
    _assert_shut(rt)
    with pytest.raises(SupervisorClosedError):
        await rt.supervisor.start(ProcessSpec(argv=("true",)), task_key="late")


@pytest.mark.xdist_group("torture")  # a locked runtime: as tests/scenarios/test_locked.py
async def test_s9_a_runtime_closed_while_locked_stops_each_component_once(
    backend: Backend,
) -> None:
    async with Runtime.open(backend.url, models=[MODEL], locked=True) as rt:
        assert not {t.get_name() for t in asyncio.all_tasks()} & set(OWN)  # never ran
        log = _record(rt)
    supervisor = STOPS.index("tidings-supervisor stopped")
    assert log == [*STOPS[:supervisor], "ends closed", *STOPS[supervisor:]]
    for component in _own(rt):
        await component.shutdown()  # idempotent: no hook runs again
        await asyncio.wait_for(component.run(), 5)  # after shutdown: returns at once
    assert len(log) == len(STOPS) + 1
    _assert_shut(rt)
    with pytest.raises(SupervisorClosedError):
        await rt.supervisor.start(ProcessSpec(argv=("true",)), task_key="late")
