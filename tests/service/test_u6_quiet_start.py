"""U6: a quiet, honest start -- without a master key ``tidings serve`` says so in the two short
lines docs/cli.md shows, pointing at the docs (and the documented way to give a key silences
them); a busy port stops it with one line naming the port before a database is made or a
runtime started; an invalid request body is told as the field path the caller sent, the
branch of a union their value fits (real ``tidings serve`` processes; the service over both
backends)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import Backend
from tests.service.conftest import Servers, assert_problem
from tests.service.test_cli import ENV, Lines, assert_one_line_error, free_port, served, tidings

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
NO_KEY = {k: v for k, v in os.environ.items()
          if k not in ("TIDINGS_MASTER_KEY", "TIDINGS_MASTER_KEY_FILE")}


def documented(section: str, kind: str) -> list[str]:
    """The ``kind`` blocks of the docs' section that starts with the heading ``section``."""
    text = DOC.read_text("utf-8").split(f"{section}\n", 1)[1]
    text = re.split(r"\n#{2,3} ", text, maxsplit=1)[0]
    return re.findall(rf"```{kind}\n(.*?)```", text, flags=re.DOTALL)


def test_u6_without_a_master_key_serve_warns_in_two_short_lines_pointing_at_the_docs(
    backend: Backend,
) -> None:
    warning = documented("### The master key", "text")[0].strip().splitlines()
    assert len(warning) == 2
    assert "docs/cli.md#the-master-key" in warning[1]
    with served(backend.url, "--token", "alice=tok-a", env=NO_KEY) as server:
        server.logs.wait_for("runtime started")
        said = [line for line in server.logs.seen if " WARNING " in line]
        assert [line.split(" ", 2)[2] for line in said] == warning
        assert all(len(line.split(": ", 1)[1]) <= 90 for line in said)


def test_u6_the_documented_master_key_starts_serve_without_a_warning(tmp_path: Path) -> None:
    [block] = documented("### The master key", "sh")
    port = free_port()
    script = block.replace("tidings serve", f"exec {sys.executable} -m tidings serve --port "
                           f"{port} --database {tmp_path / 'keyed.db'}")
    process = subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env={**ENV, **NO_KEY})
    assert process.stderr is not None
    logs = Lines(process.stderr)
    try:
        logs.wait_for("runtime started")
        assert not [line for line in logs.seen if "WARNING" in line]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def test_u6_serve_on_a_busy_port_fails_before_anything_is_created(
    tmp_path: Path, backend: Backend
) -> None:
    [documented_error] = documented("## Starting the service", "text")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        database = str(tmp_path / "busy.db") if backend.name == "sqlite" else backend.url
        result = tidings("serve", "--database", database, "--port", str(port),
                         "--token", "alice=tok-a", env=NO_KEY)
    assert result.returncode == 1
    assert_one_line_error(result, documented_error.strip().replace("8080", str(port)))
    assert f"port {port}" in result.stderr
    assert "runtime started" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no database file, no -wal, no -shm


async def test_u6_an_invalid_body_reads_as_the_field_path_the_caller_sent(
    servers: Servers,
) -> None:
    live = await servers()
    async with live.client() as alice:
        for body, detail in (
            ({"profile": {"modle": "scripted"}},
             "profile.model: required; profile.modle: unknown field"),
            ({"profile": {"model": "scripted", "tools": [1]}},
             "profile.tools.0: Input should be a valid string"),
            ({"profile": 5}, "profile: must be an object or a string"),
            ({"profile": "helper", "titel": "x"}, "titel: unknown field"),
            ({}, "profile: required"),
        ):
            refused = assert_problem(await alice.post("/v1/conversations", json=body), 422,
                                     "invalid_input")
            assert refused["detail"] == detail, body
        created = await alice.post("/v1/conversations", json={"profile": {"model": "scripted"}})
        conversation = created.json()["conversation_id"]
        refused = assert_problem(await alice.post(
            f"/v1/conversations/{conversation}/inputs", params={"wait": "soon"},
            json={"content": 5}), 422, "invalid_input")
        assert refused["detail"].startswith("wait (query parameter): ")
        assert refused["detail"].endswith("; content: Input should be a valid string")
