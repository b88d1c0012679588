"""B15 / P1: an MCP server's question reaches an A2A caller as ``input-required``, and the next
message with the task id answers it -- as a person's answer, with the form's content checked --
through the ``a2a-sdk`` client against ``tidings serve`` on both backends."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf import struct_pb2

from tests.conftest import Backend
from tests.mcp_servers import DESK
from tests.service.test_cli import Served
from tests.service.test_p1_a2a import a2a, answer, one_task, said

BOOKED = "Booked it."


def booker_config(state: Path) -> str:
    """A config whose profile ``booker`` books a table with the desk server, which asks a
    person how many seats (its state in ``state``)."""
    return f"""
[models.desk]
provider = "scripted"

[[models.desk.rules]]
when = {{ tool_result = "desk.book" }}
reply = {{ text = "{BOOKED}" }}

[[models.desk.rules]]
when = {{ text_contains = "book" }}
reply = {{ tool_calls = [{{ name = "desk.book", arguments = {{ date = "June 9" }} }}] }}

[profiles.booker]
model = "desk"
tools = ["desk.book"]

[mcp.desk]
command = {json.dumps([sys.executable, str(DESK)])}
env = {{ DESK_DIR = {json.dumps(str(state))}, FASTMCP_LOG_LEVEL = "ERROR" }}
"""


@pytest.fixture
def server(backend: Backend, tmp_path: Path) -> Iterator[Served]:
    config = tmp_path / "tidings.toml"
    config.write_text(booker_config(tmp_path), "utf-8")
    served = Served(backend.url, "--config", str(config), "--token", "alice=tok-a")
    try:
        yield served.wait_ready()
    finally:
        served.kill()


def data(value: dict[str, object], task_id: str) -> SendMessageRequest:
    content = struct_pb2.Value()
    content.struct_value.update(value)
    return SendMessageRequest(message=Message(
        message_id=f"m-{task_id}-{len(json.dumps(value))}", role=Role.ROLE_USER,
        parts=[Part(data=content)], task_id=task_id))


async def test_b15_an_mcp_question_is_input_required_and_the_next_message_answers_it(
    server: Served,
) -> None:
    async with a2a(server.url, "tok-a") as alice:
        asked = await one_task(alice, said("book a table"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "How many seats on June 9?" in asked.status.message.parts[0].text
        # Off the form: refused, and the question still waits.
        with pytest.raises(InvalidParamsError, match="seats"):
            await one_task(alice, data({"action": "accept", "content": {"seats": "many"}},
                                       asked.id))
        still = await alice.get_task(GetTaskRequest(id=asked.id))
        assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        done = await one_task(alice, data({"action": "accept", "content": {"seats": 2}},
                                          asked.id))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer(done) == BOOKED
        texts = [p.text for m in done.history for p in m.parts if p.text]
        assert "booked 2 seats on June 9" in texts
