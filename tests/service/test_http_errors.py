"""A2, S10, M1: refusals are RFC 9457 problem documents with a stable code, and a refused
request writes nothing -- oversize bodies (413 before parsing), malformed JSON, invalid UTF-8,
spoofed origins, unknown ids and routes."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

import tidings
from tests.service.conftest import Live, Servers, assert_problem, open_conversation
from tidings.errors import TidingsError
from tidings.service.problems import STATUS

# The layers above the runtime (the command line and its demo) raise their own errors to
# their own callers; the service never sees them.
ABOVE_THE_RUNTIME = ("tidings.__main__", "tidings.cli", "tidings.client", "tidings.demo",
                     "tidings.service")


def _below_the_service(name: str) -> bool:
    return not any(name == top or name.startswith(f"{top}.") for top in ABOVE_THE_RUNTIME)


def _all_error_classes() -> list[type[TidingsError]]:
    """Every TidingsError subclass the runtime's layers define (all modules imported)."""
    for module in pkgutil.walk_packages(tidings.__path__, "tidings."):
        if _below_the_service(module.name):
            importlib.import_module(module.name)
    found: list[type[TidingsError]] = []
    pending: list[type[TidingsError]] = [TidingsError]
    while pending:
        cls = pending.pop()
        if _below_the_service(cls.__module__):
            found.append(cls)
        pending += cls.__subclasses__()
    return sorted(found, key=lambda c: c.__qualname__)


def _instance(cls: type[TidingsError]) -> TidingsError:
    """An instance whatever the constructor takes: the message is set directly."""
    exc = cls.__new__(cls)
    TidingsError.__init__(exc, f"{cls.code} happened")
    return exc


def test_a2_every_tidings_error_has_an_explicit_status() -> None:
    missing = [cls.__qualname__ for cls in _all_error_classes() if cls not in STATUS]
    assert missing == [], f"map these in tidings.service.problems.STATUS: {missing}"
    codes = [cls.code for cls in _all_error_classes()]
    assert len(codes) == len(set(codes)), "every class has a code of its own"


async def test_a2_every_tidings_error_is_answered_as_its_problem(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    raised: list[TidingsError] = []

    async def failing(conversation_id: str, *, owner: str | None = None) -> Any:
        raise raised[-1]

    monkeypatch.setattr(live.runtime, "conversation", failing)
    async with live.client() as alice:
        for cls in _all_error_classes():
            raised.append(_instance(cls))
            response = await alice.get("/v1/conversations/conv_x")
            body = assert_problem(response, STATUS[cls], cls.code)
            assert body["detail"] == f"{cls.code} happened"
            if cls.code == "commit_outcome_unknown":
                assert "retry-after" not in response.headers  # read first, then retry
            elif STATUS[cls] in (429, 503):
                assert response.headers["retry-after"] == "1"
        # Named here because they matter most: an unknown outcome is never a success.
        outcome = assert_problem(await _raising(alice, raised, "CommitOutcomeUnknownError"),
                                 503, "commit_outcome_unknown")
        assert outcome["title"].startswith("The connection was lost while committing")


async def _raising(client: Any, raised: list[TidingsError], name: str) -> Any:
    [cls] = [c for c in _all_error_classes() if c.__name__ == name]
    raised.append(_instance(cls))
    return await client.get("/v1/conversations/conv_x")


async def test_a2_an_unexpected_failure_is_a_500_that_discloses_nothing(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(conversation_id: str, *, owner: str | None = None) -> Any:
        raise RuntimeError("password=hunter2 at /srv/secret/path")

    monkeypatch.setattr(live.runtime, "conversation", broken)
    async with live.client() as alice:
        response = await alice.get("/v1/conversations/conv_x")
        assert_problem(response, 500, "internal_error")
        assert "hunter2" not in response.text
        assert "secret" not in response.text
        assert "RuntimeError" not in response.text
        # The server is still serving.
        assert (await alice.get("/v1/conversations")).status_code == 200


async def _unchanged(live: Live, conv: str) -> tuple[list[Any], list[Any]]:
    async with live.client() as alice:
        inputs = (await alice.get(f"/v1/conversations/{conv}/inputs")).json()["items"]
        events = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()["items"]
    return inputs, events


async def test_s10_an_oversize_body_is_refused_before_parsing_and_writes_nothing(
    live: Live,
) -> None:
    async with live.client() as alice:
        conv = await open_conversation(alice)
        before = await _unchanged(live, conv)
        inputs = f"/v1/conversations/{conv}/inputs"
        # Declared by Content-Length.
        big = {"content": "x" * (70 * 1024)}
        body = assert_problem(await alice.post(inputs, json=big), 413, "payload_too_large")
        assert "65536" in body["detail"]

        # Streamed without a length (chunked): counted as it arrives.
        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"content": "'
            for _ in range(10):
                yield b"y" * 8192
            yield b'"}'

        streamed = await alice.post(inputs, content=chunks(),
                                    headers={"Content-Type": "application/json"})
        assert "content-length" not in streamed.request.headers
        assert_problem(streamed, 413, "payload_too_large")
        # Not JSON at all, but too large: refused for its size before anyone reads it.
        assert_problem(await alice.post(inputs, content=b"\xff" * 70_000), 413,
                       "payload_too_large")
        # The connection and the server are fine afterwards.
        assert (await alice.get(f"/v1/conversations/{conv}")).status_code == 200
    assert await _unchanged(live, conv) == before


async def test_s10_content_over_the_doors_bound_is_413_from_the_runtime(
    servers: Servers,
) -> None:
    live = await servers(max_body_bytes=256 * 1024)
    async with live.client() as alice:
        conv = await open_conversation(alice)
        before = await _unchanged(live, conv)
        response = await alice.post(f"/v1/conversations/{conv}/inputs",
                                    json={"content": "z" * (65 * 1024)})
        body = assert_problem(response, 413, "payload_too_large")
        assert "65536" in body["detail"]  # the door's bound, not the body's
        oversize_meta = {"content": "hi", "meta": {"blob": "m" * 5000}}
        assert_problem(await alice.post(f"/v1/conversations/{conv}/inputs", json=oversize_meta),
                       413, "payload_too_large")
    assert await _unchanged(live, conv) == before


async def test_m1_malformed_and_spoofed_inputs_are_refused_and_write_nothing(live: Live) -> None:
    async with live.client() as alice:
        conv = await open_conversation(alice)
        before = await _unchanged(live, conv)
        inputs = f"/v1/conversations/{conv}/inputs"
        json_type = {"Content-Type": "application/json"}

        assert_problem(await alice.post(inputs, content=b'{"content": "cut', headers=json_type),
                       400, "malformed_body")
        assert_problem(await alice.post(inputs, content=b'{"content": "\xff\xfe"}',
                                        headers=json_type), 400, "malformed_body")
        for spoof in ({"origin": "task_result"}, {"origin": "child"}, {"origin": "person"},
                      {"authored_by": {"kind": "agent", "handle": "kernel",
                                       "display_name": ""}},
                      {"run_public_id": "run_x"}, {"task_key": "t-1"},
                      {"sender_conversation_id": "conv_y"}):
            body = assert_problem(await alice.post(inputs, json={"content": "hi", **spoof}),
                                  422, "origin_not_allowed")
            assert next(iter(spoof)) in body["detail"]
        for invalid in ({"content": "hi", "meta": {"kind": "task_notification"}},
                        {"content": "   "},
                        {"content": "nul \u0000 inside"},
                        {"content": "hi", "delivery_mode": "shout"},
                        {"content": "hi", "unexpected": 1},
                        {"content": 42},
                        {}):
            assert_problem(await alice.post(inputs, json=invalid), 422, "invalid_input")
        assert_problem(await alice.post(inputs, json=["content", "hi"]), 422, "invalid_input")
        assert_problem(await alice.post(inputs, content=b"content=hi",
                                        headers={"Content-Type": "text/plain"}),
                       422, "invalid_input")
        # A lone surrogate is not UTF-8 text, however it is escaped.
        assert_problem(await alice.post(inputs, content=b'{"content": "\\ud800"}',
                                        headers=json_type), 422, "invalid_input")
    assert await _unchanged(live, conv) == before


async def test_a2_unknown_ids_and_routes_are_404_problems(live: Live) -> None:
    async with live.client() as alice:
        conv = await open_conversation(alice)
        base = f"/v1/conversations/{conv}"
        assert_problem(await alice.get("/v1/conversations/conv_nope"), 404,
                       "unknown_conversation")
        assert_problem(await alice.get(f"{base}/runs/run_nope"), 404, "unknown_run")
        assert_problem(await alice.get(f"{base}/tasks/nope"), 404, "unknown_task")
        assert_problem(await alice.get(f"{base}/results/res_nope"), 404, "unknown_result")
        assert_problem(await alice.get("/v1/nothing-here"), 404, "not_found")
        assert_problem(await alice.patch(base, json={}), 405, "method_not_allowed")
        assert_problem(await alice.get("/v1/conversations/bad%01id"), 422, "invalid_input")
        assert_problem(await alice.get(f"{base}/events", headers={"Last-Event-ID": "x1"}), 422,
                       "invalid_input")
