"""Issue 7, hostile input: schemathesis against the published OpenAPI schema of a real
``tidings serve`` process, on both backends. Every operation gets generated requests as the
principal alice -- requests the schema allows, and (H4) requests that break it in their path,
query, headers or body: no answer is a 5xx, every answer's status, content type and body are
the ones the schema documents for the operation, and a request that breaks the schema is
refused."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import (
    POSTGRES_DSN_ENV,
    drop_postgres_database,
    fresh_postgres_database,
    postgres_admin_dsn,
)
from tests.waiting import wait_serving

TOKEN = "alice-token"
# Examples per operation and run: each run draws new ones (no example database), so the runs
# of CI add up; 12 keeps these four tests near a minute and a half of the suite's time.
EXAMPLES = 12
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
NEGATIVE_CHECKS = [*CHECKS, negative_data_rejection]  # and a request off the schema is a 4xx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[str]:
    """A ``tidings serve`` process on a fresh database of each backend."""
    admin = postgres_admin_dsn()
    if request.param == "postgres":
        if admin is None:
            pytest.skip(f"PostgreSQL tests need {POSTGRES_DSN_ENV}")
        database = fresh_postgres_database(admin, template=None)
    else:
        database = str(Path(tmp_path_factory.mktemp("schemathesis")) / "st.db")
    port = _free_port()
    log = Path(tmp_path_factory.mktemp("serve")) / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tidings", "serve", "--database", database, "--port",
             str(port), "--token", f"alice={TOKEN}"],
            stdout=subprocess.DEVNULL, stderr=sink, env={**os.environ},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_serving(base, process=process,
                     output=lambda: log.read_text()[-3000:])
        yield base
    finally:
        process.terminate()
        process.wait(30)
        if request.param == "postgres" and admin is not None:
            drop_postgres_database(admin, database)


def _exercise(operation: Any, served: str, tried: dict[str, int],
              mode: GenerationMode = GenerationMode.POSITIVE) -> None:
    label = f"{operation.method.upper()} {operation.path}"
    checks = NEGATIVE_CHECKS if mode is GenerationMode.NEGATIVE else CHECKS

    # The token is fixed, not generated: a request off the schema breaks something else.
    strategy = operation.as_strategy(generation_mode=mode,
                                     headers={"Authorization": f"Bearer {TOKEN}"})

    @given(case=strategy)
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def exercise(case: Any) -> None:
        tried[label] = tried.get(label, 0) + 1
        case.call_and_validate(base_url=served, checks=checks, timeout=10)

    exercise()


def _operations(served: str) -> list[Any]:
    """Every operation the schema publishes but the SSE feed (it never ends by itself; its
    frames: test_http_sse)."""
    api = schemathesis.openapi.from_url(f"{served}/openapi.json")
    operations = []
    for found in api.get_all_operations():
        assert isinstance(found, Ok), found  # the published schema is valid throughout
        if not found.ok().path.endswith("/events"):
            operations.append(found.ok())
    return operations


def test_a2_schemathesis_finds_no_5xx_and_no_answer_off_the_schema(served: str) -> None:
    tried: dict[str, int] = {}
    for operation in _operations(served):
        _exercise(operation, served, tried)
    assert len(tried) >= 25  # every operation the schema publishes (but the feed) was tried
    print(f"schemathesis: {sum(tried.values())} requests over {len(tried)} operations, "  # noqa: T201
          "0 5xx, 0 schema mismatches")


def test_h4_schemathesis_requests_off_the_schema_are_refused_never_a_5xx(served: str) -> None:
    """Values the published bounds exclude -- in the path, the query, the headers or the body
    -- get a documented 4xx problem, never a 5xx and never a success."""
    tried: dict[str, int] = {}
    for operation in _operations(served):
        try:
            _exercise(operation, served, tried, GenerationMode.NEGATIVE)
        except Unsatisfiable:
            # Only an operation that takes nothing (no parameter, no body) has no request off
            # its schema (the token is fixed).
            raw = operation.definition.raw
            assert not raw.get("parameters"), operation.path
            assert "requestBody" not in raw, operation.path
    assert len(tried) >= 25
    print(f"schemathesis, off the schema: {sum(tried.values())} requests over "  # noqa: T201
          f"{len(tried)} operations, 0 5xx, all refused")
