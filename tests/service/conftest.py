"""A real server on loopback for the HTTP tests: uvicorn in an asyncio task of the test's own
event loop, on an ephemeral port, over a runtime opened on the test's database (both
backends), talked to with httpx.

Also a small JSON Schema checker for the bodies the OpenAPI document promises (no new
dependency): ``$ref``, ``type``, ``properties``/``required``/``additionalProperties``, ``items``,
``anyOf``/``oneOf``/``allOf``, ``enum`` and ``const`` -- what pydantic's schemas use.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest_asyncio

from tests.conftest import RuntimeFactory
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime
from tidings.service import Server, create_app

ALICE = "alice-token"
BOB = "bob-token"
OPERATOR = "operator-token"
TOKENS = {ALICE: "alice", BOB: "bob"}
KEY = MasterKey.generate()  # one key per session: a restarted runtime opens what it sealed
WAIT_S = 30.0  # a bound on waiting for something the test arranged; never asserted on

MODEL = ScriptedModel(
    rules=[
        Rule({"text_contains": "run in the background"},
             {"tool_calls": [{"name": "shell", "arguments": {
                 "command": "printf 'bad \\377 byte'; exit 3", "background": True}}]}),
        Rule({"text_contains": "sleep in the background"},
             {"tool_calls": [{"name": "shell", "arguments": {
                 "command": "sleep 30", "background": True}}]}),
        Rule({"meta_kind": "task_notification"}, {"text": "The task ended."}),
        Rule({"tool_result": "shell"}, {"text": "Started; I will report back."}),
    ],
    default={"echo": True},
)


@dataclass
class Live:
    """One uvicorn server for one app, in a task of the running loop."""

    runtime: Runtime
    options: Mapping[str, Any] = field(default_factory=dict)
    server: Server | None = None
    task: asyncio.Task[None] | None = None

    async def start(self) -> Live:
        app = create_app(
            self.runtime, tokens=TOKENS, operator_tokens=[OPERATOR],
            **self.options,
        )
        self.server = Server(app, port=0, log_level="warning", timeout_graceful_shutdown=5)
        self.task = asyncio.create_task(self.server.serve())
        async with asyncio.timeout(WAIT_S):
            while not self.server.started:
                if self.task.done():
                    self.task.result()  # raise what stopped it
                await asyncio.sleep(0.005)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    def client(self, token: str | None = ALICE) -> httpx.AsyncClient:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=WAIT_S)

    async def stop(self) -> None:
        if self.server is None or self.task is None:
            return
        self.server.should_exit = True
        async with asyncio.timeout(WAIT_S):
            await self.task
        self.server = self.task = None


class Servers:
    """Starts servers over runtimes of the test's database; stops them when the test ends."""

    def __init__(self, runtimes: RuntimeFactory) -> None:
        self.runtimes = runtimes
        self._live: list[Live] = []

    async def runtime(self) -> Runtime:
        return await self.runtimes(models=[MODEL], master_key=KEY)

    async def __call__(self, runtime: Runtime | None = None, **options: Any) -> Live:
        live = Live(runtime or await self.runtime(), options)
        self._live.append(live)
        return await live.start()

    async def aclose(self) -> None:
        for live in reversed(self._live):
            with contextlib.suppress(Exception):
                await live.stop()


@pytest_asyncio.fixture
async def servers(runtimes: RuntimeFactory) -> AsyncIterator[Servers]:
    """``await servers()`` serves a new runtime; ``await servers(runtime, **create_app options)``
    serves a given one."""
    factory = Servers(runtimes)
    try:
        yield factory
    finally:
        await factory.aclose()


@pytest_asyncio.fixture
async def live(servers: Servers) -> Live:
    """A server over a fresh runtime on the test's backend."""
    return await servers()


async def open_conversation(
    client: httpx.AsyncClient, *, tools: tuple[str, ...] = (), title: str = ""
) -> str:
    response = await client.post(
        "/v1/conversations",
        json={"profile": {"model": "scripted", "tools": list(tools)}, "title": title},
    )
    assert response.status_code == 201, response.text
    conversation_id = response.json()["conversation_id"]
    assert isinstance(conversation_id, str)
    return conversation_id


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """A problem document (RFC 9457) with this status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert isinstance(body, dict)
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"] == f"urn:tidings:problem:{code}"
    assert isinstance(body["title"], str)
    assert body["title"]
    assert isinstance(body["detail"], str)
    return body


# -- a small JSON Schema checker -----------------------------------------------------------------

_TYPES: Mapping[str, Any] = {
    "string": str, "integer": int, "number": (int, float), "boolean": bool,
    "array": list, "object": dict, "null": type(None),
}


def _is(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[kind])


def schema_errors(
    value: Any, schema: Mapping[str, Any], document: Mapping[str, Any], where: str = "$"
) -> list[str]:
    """What in ``value`` does not match ``schema`` (refs resolved in ``document``).

    Objects with ``properties`` and no ``additionalProperties`` are read as closed: a field
    the schema does not document is an error, so the schema cannot drift from the bodies.
    """
    if "$ref" in schema:
        target: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return schema_errors(value, target, document, where)
    errors: list[str] = []
    if "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf", schema.get("oneOf", []))
        if all(schema_errors(value, option, document, where) for option in options):
            errors.append(f"{where}: {value!r} matches none of {options}")
    for part in schema.get("allOf", []):
        errors += schema_errors(value, part, document, where)
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            return [*errors, f"{where}: {value!r} is not of type {kinds}"]
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        errors += [f"{where}: missing {name!r}" for name in schema.get("required", [])
                   if name not in value]
        extra = schema.get("additionalProperties", not properties)
        for name, item in value.items():
            if name in properties:
                errors += schema_errors(item, properties[name], document, f"{where}.{name}")
            elif extra is False:
                errors.append(f"{where}: undocumented field {name!r}")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, document, f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += schema_errors(item, schema["items"], document, f"{where}[{index}]")
    return errors
