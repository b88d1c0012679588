"""A2: the OpenAPI schema is published, documents every route with its problem responses, and
what the main routes really send matches what it documents -- success bodies and problems."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from tests.service.conftest import (
    BOB,
    OPERATOR,
    Live,
    open_conversation,
    schema_errors,
)

PROBLEM = "application/problem+json"

ROUTES: dict[str, set[str]] = {
    "/v1/conversations": {"get", "post"},
    "/v1/conversations/{conversation_id}": {"get", "delete"},
    "/v1/conversations/{conversation_id}/archive": {"post"},
    "/v1/conversations/{conversation_id}/unarchive": {"post"},
    "/v1/conversations/{conversation_id}/inputs": {"get", "post"},
    "/v1/conversations/{conversation_id}/goal": {"put"},
    "/v1/conversations/{conversation_id}/goal/checkpoint": {"post"},
    "/v1/conversations/{conversation_id}/transcript": {"get"},
    "/v1/conversations/{conversation_id}/runs": {"get"},
    "/v1/conversations/{conversation_id}/runs/{run_id}": {"get"},
    "/v1/conversations/{conversation_id}/stop": {"post"},
    "/v1/conversations/{conversation_id}/compact": {"post"},
    "/v1/conversations/{conversation_id}/restart": {"post"},
    "/v1/unlock": {"post"},
    "/v1/agui": {"post"},
    "/v1/conversations/{conversation_id}/approvals": {"get"},
    "/v1/conversations/{conversation_id}/approvals/{approval_id}/decision": {"post"},
    "/v1/conversations/{conversation_id}/questions": {"get"},
    "/v1/conversations/{conversation_id}/profile": {"put"},
    "/v1/conversations/{conversation_id}/questions/{question_id}/answer": {"post"},
    "/v1/conversations/{conversation_id}/runs/{run_id}/retry": {"post"},
    "/v1/conversations/{conversation_id}/runs/{run_id}/stop": {"post"},
    "/v1/conversations/{conversation_id}/children": {"get"},
    "/v1/conversations/{conversation_id}/children/{task_key}/cancel": {"post"},
    "/v1/conversations/{conversation_id}/tasks": {"get"},
    "/v1/conversations/{conversation_id}/tasks/{task_key}": {"get"},
    "/v1/conversations/{conversation_id}/results": {"get"},
    "/v1/conversations/{conversation_id}/results/{result_id}": {"get"},
    "/v1/conversations/{conversation_id}/signals/stats": {"get"},
    "/v1/conversations/{conversation_id}/dead-letters": {"get"},
    "/v1/conversations/{conversation_id}/events": {"get"},
    "/v1/conversations/{conversation_id}/events.json": {"get"},
    "/v1/signals/stats": {"get"},
    "/v1/dead-letters": {"get"},
    "/v1/dead-letters/{delivery_id}": {"get"},
    "/v1/dead-letters/{delivery_id}/retry": {"post"},
    "/v1/dead-letters/{delivery_id}/discard": {"post"},
    "/v1/push-dead-letters": {"get"},
    "/v1/instances": {"get"},
    "/v1/session": {"get"},
    "/metrics": {"get"},
    "/health": {"get"},
}


class Documented:
    """Checks responses against the operation the schema documents for them."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.checked: set[tuple[str, str, int]] = set()

    def check(self, response: httpx.Response, template: str) -> None:
        method = response.request.method.lower()
        operation = self.document["paths"][template][method]
        status = str(response.status_code)
        assert status in operation["responses"], (method, template, status, response.text)
        media = response.headers["content-type"].split(";")[0].strip()
        content = operation["responses"][status].get("content", {})
        assert media in content, (method, template, status, media, list(content))
        errors = schema_errors(response.json(), content[media]["schema"], self.document)
        assert errors == [], (method, template, status, errors)
        self.checked.add((method, template, response.status_code))


async def test_a2_openapi_documents_every_route_and_its_problems(live: Live) -> None:
    async with live.client(None) as anonymous:
        response = await anonymous.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    assert {path: set(ops) for path, ops in paths.items()} == ROUTES
    problem = {"$ref": "#/components/schemas/Problem"}
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = operation["responses"]
            for status, documented in responses.items():
                if status.startswith(("4", "5")):
                    assert documented["content"] == {PROBLEM: {"schema": problem}}, (
                        method, path, status)
            if path != "/health":
                assert "401" in responses, (method, path)
            if path.startswith("/v1/conversations/"):
                assert "404" in responses, (method, path)
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    events = paths["/v1/conversations/{conversation_id}/events"]["get"]["responses"]["200"]
    assert "text/event-stream" in events["content"]


async def test_a2_the_main_routes_send_what_the_schema_documents(live: Live) -> None:
    async with live.client(None) as anonymous:
        documented = Documented((await anonymous.get("/openapi.json")).json())
    c = "/v1/conversations/{conversation_id}"
    async with live.client() as alice, live.client(BOB) as bob, \
            live.client(OPERATOR) as operator, live.client(None) as anonymous:
        created = await alice.post("/v1/conversations", json={
            "profile": {"model": "scripted", "fallbacks": ["scripted"], "system": "Be brief."},
            "title": "schema"})
        documented.check(created, "/v1/conversations")
        conv = created.json()["conversation_id"]
        base = f"/v1/conversations/{conv}"
        posted = await alice.post(f"{base}/inputs", json={"content": "hi", "meta": {"n": 1}})
        documented.check(posted, f"{c}/inputs")
        await live.runtime.settle(conv)
        run_id = (await alice.get(f"{base}/runs")).json()["items"][0]["run_id"]
        result = await live.runtime.keyring.results().put(conv, "é".encode() * 10)

        for url, template in (
            ("/v1/conversations", "/v1/conversations"),
            (base, c),
            (f"{base}/inputs", f"{c}/inputs"),
            (f"{base}/transcript", f"{c}/transcript"),
            (f"{base}/runs", f"{c}/runs"),
            (f"{base}/runs/{run_id}", f"{c}/runs/{{run_id}}"),
            (f"{base}/tasks", f"{c}/tasks"),
            (f"{base}/results", f"{c}/results"),
            (f"{base}/results/{result.result_id}?limit_bytes=5", f"{c}/results/{{result_id}}"),
            (f"{base}/signals/stats", f"{c}/signals/stats"),
            (f"{base}/dead-letters", f"{c}/dead-letters"),
            (f"{base}/events.json", f"{c}/events.json"),
        ):
            response = await alice.get(url)
            assert response.status_code == 200, (url, response.text)
            documented.check(response, template)
        documented.check(await alice.put(f"{base}/goal", json={"status": "active"}),
                         f"{c}/goal")
        documented.check(await alice.post(f"{base}/goal/checkpoint"), f"{c}/goal/checkpoint")
        await live.runtime.settle(conv)
        documented.check(await alice.post(f"{base}/stop"), f"{c}/stop")
        documented.check(await alice.post(f"{base}/compact"), f"{c}/compact")
        documented.check(await operator.get("/v1/signals/stats"), "/v1/signals/stats")
        documented.check(await operator.get("/v1/dead-letters"), "/v1/dead-letters")
        documented.check(await anonymous.get("/health"), "/health")

        # Problems are documented where they happen, in the shape they have.
        documented.check(await anonymous.get(base), c)  # 401
        documented.check(await bob.get(base), c)  # 404: not Bob's
        documented.check(await alice.get(f"{base}/tasks/nope"), f"{c}/tasks/{{task_key}}")
        documented.check(await operator.get(base), c)  # 403: not a principal
        documented.check(await alice.get("/v1/signals/stats"), "/v1/signals/stats")  # 403
        documented.check(await alice.post(f"{base}/inputs", json={"content": 1}),
                         f"{c}/inputs")  # 422
        documented.check(await alice.post(f"{base}/inputs", content=b"{",
                                          headers={"Content-Type": "application/json"}),
                         f"{c}/inputs")  # 400
        documented.check(await alice.post(f"{base}/inputs", json={"content": "x" * 70_000}),
                         f"{c}/inputs")  # 413
        documented.check(await alice.post(f"{base}/archive"), f"{c}/archive")
        documented.check(await alice.post(f"{base}/inputs", json={"content": "late"}),
                         f"{c}/inputs")  # 409
        documented.check(await alice.delete(base), c)
    statuses = {status for _, _, status in documented.checked}
    assert {200, 201, 202, 400, 401, 403, 404, 409, 413, 422} <= statuses


async def test_a2_a_conversation_it_cannot_see_is_documented_as_404(live: Live) -> None:
    """The 404 of a foreign conversation is the documented Problem, like any other."""
    async with live.client(None) as anonymous:
        documented = Documented((await anonymous.get("/openapi.json")).json())
    async with live.client() as alice, live.client(BOB) as bob:
        conv = await open_conversation(alice)
        for suffix in ("/transcript", "/events", "/events.json", "/results", "/tasks"):
            response = await bob.get(f"/v1/conversations/{conv}{suffix}")
            assert response.status_code == 404
            documented.check(response, "/v1/conversations/{conversation_id}" + suffix)
