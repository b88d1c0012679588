"""P3 through the runtime: the webhook worker is woken by the commits of conversations that
have a push config -- their notifications go out at once -- and by no other: a runtime whose
conversations have no push config reads nothing for it per commit."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.waiting import eventually, wait_until
from tidings.models.scripted import Rule, ScriptedModel
from tidings.push import PushConfig, PushDeliveryConfig
from tidings.runtime.root import RuntimeConfig
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.types import Profile

WAIT_S = 20.0  # a bound on waiting for what the test arranged; never asserted on

SCRIPT = ScriptedModel(
    rules=[
        Rule({"text_contains": "use the gate"},
             {"tool_calls": [{"name": "gate", "arguments": {}}]}),
        Rule({"tool_result": "gate"}, {"text": "Through the gate."}),
    ],
    default={"echo": True},
)
PROFILE = Profile(model="scripted", tools=("gate",))


class Receiver:
    """A webhook receiver on loopback: the bodies it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    try:
        yield found
    finally:
        found.close()


def gate() -> tuple[Tool, asyncio.Event]:
    opened = asyncio.Event()

    async def run(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        await opened.wait()
        return ToolOutput("opened")

    return Tool("gate", "Wait at the gate.", run), opened


async def test_p3_the_worker_wakes_for_the_commits_that_can_owe_a_notification_only(
    runtimes: RuntimeFactory, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    tool, opened = gate()
    # The worker's own poll is an hour away: what is delivered here, a commit's wake sent.
    rt = await runtimes(models=[SCRIPT], tools=[tool], config=RuntimeConfig(
        push=PushDeliveryConfig(poll=timedelta(hours=1), allow_private=True)))
    reads: list[int] = []
    looked = rt.push_deliveries.next_due_us

    async def counted() -> int | None:
        reads.append(1)
        return await looked()

    monkeypatch.setattr(rt.push_deliveries, "next_due_us", counted)
    quiet = (await rt.create_conversation("alice", PROFILE)).conversation_id
    loud = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await asyncio.sleep(0.2)  # the worker's first pass, which reads what it watches
    reads.clear()

    for n in range(5):
        assert (await rt.post(quiet, f"turn {n}", wait=True, timeout=WAIT_S)).reply == f"turn {n}"
    assert reads == []  # five turns' commits, none of a conversation with a config

    held = await rt.post(loud, "use the gate")
    await wait_until(lambda: rt.coordinator.active(loud), what="the gated turn runs")
    await rt.push_configs.put(PushConfig(task_id=held.input_id, owner="alice",
                                         config_id="hook", conversation_id=loud,
                                         url=receiver.url))
    opened.set()
    await wait_until(lambda: any(b.get("statusUpdate", {}).get("status", {}).get("state")
                                 == "TASK_STATE_COMPLETED" for b in receiver.bodies),
                     what="the completed task's notification arrives", within_s=WAIT_S)

    # Every notification acknowledged, and the worker's pass after its last attempt made.
    await eventually(looked, lambda due: due is None, what="nothing left to deliver")
    await asyncio.sleep(0.2)
    reads.clear()
    for n in range(5):
        await rt.post(quiet, f"again {n}", wait=True, timeout=WAIT_S)
    assert reads == []  # the config is the other conversation's
