"""L1 over HTTP: on a server whose runtime booted locked, every mutating route answers 503
``runtime_locked`` and changes nothing; reads answer; once an operator unlocks it, the same
routes work."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import Backend
from tests.scenarios.test_locked import (
    KEY,
    MODEL,
    TOOLS,
    World,
    build_world,
    database_rows,
    pending_approval,
)
from tests.service.conftest import OPERATOR, Servers, assert_problem
from tidings.runtime.root import Runtime
from tidings.service import create_app

BASE = "/v1/conversations"


def _path(template: str, w: World, approval_id: str = "") -> str:
    return template.format(c=w.conversation_id, failed=w.failed_run, done=w.completed_run,
                           key=w.task_key, approval=approval_id or w.approval_id,
                           dead=w.dead_letter, question=w.question_id)


# Every mutating route: (method, path template, body).
ROUTES: dict[str, tuple[str, str, object]] = {
    "create": ("POST", BASE, {"profile": {"model": "scripted"}}),
    "archive": ("POST", BASE + "/{c}/archive", None),
    "unarchive": ("POST", BASE + "/{c}/unarchive", None),
    "delete": ("DELETE", BASE + "/{c}", None),
    "post_input": ("POST", BASE + "/{c}/inputs", {"content": "hello"}),
    "set_goal": ("PUT", BASE + "/{c}/goal", {"status": "active", "text": "ship"}),
    "checkpoint": ("POST", BASE + "/{c}/goal/checkpoint", None),
    "stop": ("POST", BASE + "/{c}/stop", None),
    "compact": ("POST", BASE + "/{c}/compact", None),
    "stop_run": ("POST", BASE + "/{c}/runs/{done}/stop", None),
    "cancel_child": ("POST", BASE + "/{c}/children/{key}/cancel", None),
    "retry": ("POST", BASE + "/{c}/runs/{failed}/retry", {}),
    "restart": ("POST", BASE + "/{c}/restart", {}),
    "decide": ("POST", BASE + "/{c}/approvals/{approval}/decision", {"approve": True}),
    "answer": ("POST", BASE + "/{c}/questions/{question}/answer", {"action": "decline"}),
    "change_profile": ("PUT", BASE + "/{c}/profile", {"profile": {"model": "scripted"}}),
    "retry_dead_letter": ("POST", "/v1/dead-letters/{dead}/retry", None),
    "discard_dead_letter": ("POST", "/v1/dead-letters/{dead}/discard", None),
    "agui_run": ("POST", "/v1/agui", {
        "threadId": "{c}", "runId": "run-1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {}, "messages": [{"id": "m-1", "role": "user", "content": "hello"}]}),
}
OPERATOR_ROUTES = frozenset({"retry_dead_letter", "discard_dead_letter"})
TEMPLATES = {
    BASE + "/{conversation_id}": BASE + "/{c}",
    "{run_id}/stop": "{done}/stop",
    "{run_id}/retry": "{failed}/retry",
    "{task_key}": "{key}",
    "{approval_id}": "{approval}",
    "{question_id}": "{question}",
    "{delivery_id}": "{dead}",
}


def _as_table_template(path: str) -> str:
    path = path.replace(BASE + "/{conversation_id}", BASE + "/{c}")
    for route_part, table_part in TEMPLATES.items():
        path = path.replace(route_part, table_part)
    return path


async def _request(clients: tuple[httpx.AsyncClient, httpx.AsyncClient], name: str, w: World,
                   approval_id: str = "") -> httpx.Response:
    """The route, asked by alice -- or by the operator, for the operator's routes."""
    method, template, body = ROUTES[name]
    client = clients[1] if name in OPERATOR_ROUTES else clients[0]
    if body is not None:  # a conversation's id in the body too (the AG-UI run's thread)
        body = json.loads(json.dumps(body).replace("{c}", w.conversation_id))
    return await client.request(method, _path(template, w, approval_id), json=body)


async def test_l1_http_the_table_names_every_mutating_route(backend: Backend) -> None:
    """A new mutating route is added to the table (and so refused while locked) or this fails."""
    async with Runtime.open(backend.url, models=[MODEL], locked=True) as runtime:
        document = create_app(runtime, tokens={}).openapi()
    mutating = {(method.upper(), _as_table_template(path))
                for path, operations in document["paths"].items()
                for method in operations if method != "get" and path != "/v1/unlock"}
    assert mutating == {(method, template) for method, template, _ in ROUTES.values()}


@pytest.mark.parametrize("name", sorted(ROUTES))
async def test_l1_http_a_locked_server_refuses_every_mutating_route_and_changes_nothing(
    servers: Servers, backend: Backend, name: str,
) -> None:
    world = await build_world(backend.url)
    async with Runtime.open(backend.url, models=[MODEL], tools=TOOLS, locked=True) as runtime:
        live = await servers(runtime)
        async with live.client() as alice, live.client(OPERATOR) as operator:
            before = database_rows(backend.url)
            assert_problem(await _request((alice, operator), name, world), 503,
                           "runtime_locked")
            assert database_rows(backend.url) == before  # no row, no event
            # Reads stay allowed.
            read = await alice.get(f"{BASE}/{world.conversation_id}/runs")
            assert read.status_code == 200, read.text

            unlocked = await operator.post("/v1/unlock", json={"master_key": KEY.secret.hex()})
            assert unlocked.status_code == 200, unlocked.text
            approval_id = ""
            if name == "decide":  # the world's approval expired with its run: hold a new one
                await runtime.post(world.conversation_id, "deploy it")
                approval_id = await pending_approval(runtime, world.conversation_id)
            if name == "compact":
                await runtime.settle(world.conversation_id)
            answered = await _request((alice, operator), name, world, approval_id)
            assert answered.status_code < 300, answered.text  # the same route works now
        await live.stop()

