"""B12 / A2: the worked example of docs/embedding.md -- tidings mounted in a FastAPI app of the
user's own, its runtime opened by that app's lifespan -- runs as written: under uvicorn (a real
process on loopback, stopped by SIGTERM) and under ``TestClient``, on both backends. Before the
lifespan the mounted routes refuse with 503; a runtime that cannot open fails the app's start."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tidings
from tests.conftest import Backend
from tests.service.test_cli import ENV, WAIT_S, Lines
from tidings import InstanceNotRunningError, ScriptedModel
from tidings.errors import DatabasePathError
from tidings.runtime.inspection import Inspection, Status
from tidings.service import Embedding

DOC = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"
HEADERS = {"Authorization": "Bearer secret-a"}


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text("utf-8"), flags=re.DOTALL)


def write_example(backend: Backend, where: Path) -> Path:
    """The documented ``myapp.py``, on the test's database."""
    program = blocks("python")[0]
    assert 'tidings.open("sqlite:///agent.db"' in program
    path = where / "myapp.py"
    path.write_text(program.replace("sqlite:///agent.db", backend.url), "utf-8")
    return path


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _status(url: str) -> Status:
    inspection = await Inspection.open(url)
    async with inspection:
        return await inspection.status(None)


def test_b12_the_embedding_example_serves_both_halves_under_uvicorn(
    backend: Backend, tmp_path: Path,
) -> None:
    write_example(backend, tmp_path)
    command = blocks("sh")[0].split()
    assert command[:2] == ["uvicorn", "myapp:app"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "myapp:app", "--host", "127.0.0.1", "--port", "0"],
        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    err = Lines(proc.stderr)
    try:
        port = err.wait_for(r"Uvicorn running on http://127\.0\.0\.1:(\d+)").group(1)
        err.wait_for("Application startup complete")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S) as http:
            # Through the mounted tidings routes, with the documented token ...
            created = http.post("/agent/v1/conversations", headers=HEADERS,
                                json={"profile": "echo"})
            assert created.status_code == 201, created.text
            conversation = created.json()["conversation_id"]
            answered = http.post(f"/agent/v1/conversations/{conversation}/inputs",
                                 params={"wait": 10}, headers=HEADERS,
                                 json={"content": "hello"})
            assert answered.status_code == 200, answered.text
            assert answered.json()["reply"] == "hello"
            # ... and its refusals are still its own problem documents.
            refused = http.post("/agent/v1/conversations", json={"profile": "echo"})
            assert refused.status_code == 401
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert http.get("/agent/health").json()["status"] == "ok"
            # The user's own routes, over the same runtime.
            assert http.get(f"/conversations/{conversation}/last-reply").json() == {
                "reply": "hello"}
            asked = http.post("/ask", json={"text": "hi"}).json()
            assert asked["reply"] == "hi"
            events = http.get(f"/agent/v1/conversations/{asked['conversation_id']}/events.json",
                              headers=HEADERS).json()
            assert "hi" in [e["data"].get("content") for e in events["items"]]
            # The event feed, under the mount path, resumed after the first event; still open
            # when the server is told to stop.
            first = http.get(f"/agent/v1/conversations/{conversation}/events.json",
                             headers=HEADERS).json()["items"][0]["seq"]
            with http.stream("GET", f"/agent/v1/conversations/{conversation}/events",
                             headers={**HEADERS, "Last-Event-ID": str(first)}) as feed:
                assert feed.status_code == 200
                lines = feed.iter_lines()
                ids = []
                for line in lines:
                    if line.startswith("id: "):
                        ids.append(int(line.removeprefix("id: ")))
                    if line.startswith("data: "):
                        message = json.loads(line.removeprefix("data: "))["data"].get("message")
                        if message and (message["role"], message["content"]) == (
                                "assistant", "hello"):
                            break  # the reply, from the journal
                assert ids[0] == first + 1
                proc.send_signal(signal.SIGTERM)
                # uvicorn shuts down gracefully: the open feed ends, a whole response (a cut
                # one raises here), then the lifespan.
                for _ in lines:
                    pass
        assert proc.wait(timeout=WAIT_S) in (0, -signal.SIGTERM)  # ends by its signal
        err.wait_for("Application shutdown complete")
        # Nothing was cut short ("ASGI callable returned without completing response").
        assert not [line for line in err.seen if "Traceback" in line or "ERROR" in line]
        # The lifespan closed the runtime: its instance retired (a killed one would still be
        # listed, gone and not reconciled), nothing left running.
        status = asyncio.run(_status(backend.url))
        assert status.report.instances == ()
        assert status.report.open_runs == ()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_b12_the_embedding_example_runs_under_testclient(
    backend: Backend, tmp_path: Path,
) -> None:
    example = load(write_example(backend, tmp_path), f"myapp_{backend.name}")
    namespace: dict[str, object] = {"app": example.app}
    exec(blocks("python")[1], namespace)  # the documented TestClient block
    assert namespace["reply"] == "hi"
    agent = example.agent
    assert isinstance(agent, Embedding)
    assert not agent.started  # closed with the client


def test_a2_an_embedding_refuses_before_its_lifespan_and_after(tmp_path: Path) -> None:
    agent = Embedding(lambda: tidings.open(f"sqlite:///{tmp_path}/a.db", models=[ScriptedModel()]),
                      tokens={"alice": "secret-a"})
    app = FastAPI(lifespan=agent.lifespan)
    app.mount("/agent", agent.app)
    client = TestClient(app)
    before = client.get("/agent/health")
    assert (before.status_code, before.json()["code"]) == (503, "instance_not_running")
    with pytest.raises(InstanceNotRunningError):
        agent.runtime()
    with client:
        assert client.get("/agent/health").json()["status"] == "ok"
        assert agent.runtime().instance_id == client.get("/agent/health").json()["instance_id"]
    after = client.get("/agent/health")
    assert (after.status_code, after.json()["code"]) == (503, "instance_not_running")
    client.close()


def test_a2_a_runtime_that_cannot_open_fails_the_app_s_start(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-directory" / "agent.db"
    agent = Embedding(lambda: tidings.open(f"sqlite:///{missing}", models=[ScriptedModel()]),
                      tokens={"alice": "secret-a"})
    app = FastAPI(lifespan=agent.lifespan)
    app.mount("/agent", agent.app)
    with pytest.raises(DatabasePathError, match="no-such-directory"), TestClient(app):
        pass
    assert not agent.started
