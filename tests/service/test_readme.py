"""B2 and the README: its quickstarts are run as written -- the service's commands in a shell
against a real ``tidings serve``, the library's program in a Python process -- so the answers
they show are the answers a reader gets. Only what a test must change is changed: the port,
the database (each backend), where the commands are installed, and the feed's ``watch``, which
never ends by itself, is given a few seconds."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Backend
from tests.service.test_cli import free_port, served

README = Path(__file__).resolve().parents[2] / "README.md"
WAIT_S = 120.0  # a bound on the whole quickstart; never asserted on


def block(heading: str, language: str) -> str:
    """The first fenced block of ``language`` under the README's ``heading``."""
    text = README.read_text("utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert found is not None, f"no {language} block under {heading!r}"
    return found.group(1)


def service_script(backend: Backend, port: int) -> str:
    """The service quickstart, as a script a test can run to the end."""
    bindir = Path(sys.executable).parent
    assert (bindir / "tidings").exists(), "the tidings command is installed beside python"
    database = "tidings.db" if backend.name == "sqlite" else backend.url
    lines = []
    for line in block("Quickstart: the service", "sh").splitlines():
        line = line.replace(".venv/bin/", f"{bindir}/").replace("localhost:8080",
                                                               f"localhost:{port}")
        line = line.replace("--database tidings.db", f"--database {database}")
        if f"{bindir}/tidings serve " in line:
            # Its own port; its log to a file, so that the script's output ends with it.
            line = line.replace("tidings serve ", f"tidings serve --port {port} ")
            line = line.replace(" &", " > serve.log 2>&1 &")
        if f"{bindir}/tidings watch" in line:
            line = "timeout 8 " + line.split("#", 1)[0].rstrip() + " || true"
        lines.append(line)
    return "set -euo pipefail\n" + "\n".join(lines) + "\n"


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("timeout") is None,
                    reason="the quickstart uses curl and timeout")
def test_b2_the_readme_service_quickstart_shows_the_answer(
    backend: Backend, tmp_path: Path
) -> None:
    script = tmp_path / "quickstart.sh"
    script.write_text(service_script(backend, free_port()), "utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_")}
    process = subprocess.Popen(
        ["bash", str(script)], cwd=tmp_path, env={**env, "COLUMNS": "250"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=WAIT_S)
    finally:
        # The server the quickstart started in the background goes with its session.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    assert process.returncode == 0, f"{out}\n{err}\n{(tmp_path / 'serve.log').read_text()}"
    lines = out.splitlines()
    # tidings post --wait printed the reply of the turn it started.
    assert "hello" in lines, out
    # The waiting post over HTTP answered with its run and reply.
    [answer] = [json.loads(line) for line in lines if line.startswith('{"status"')]
    assert answer["status"] == "completed"
    assert answer["timed_out"] is False
    assert answer["reply"] == "and again"
    assert answer["run"]["status"] == "completed"
    assert answer["input"]["run_id"] == answer["run"]["run_id"]
    # The feed showed both turns; the metrics were served.
    assert sum("turn_status" in line and "completed" in line for line in lines) == 2, out
    assert any(line.startswith("tidings_") for line in lines), out


def test_b2_the_readme_library_quickstart_shows_the_answer(
    backend: Backend, tmp_path: Path
) -> None:
    program = block("Quickstart: the library", "python")
    if backend.name == "postgres":
        program = program.replace('"sqlite:///agent.db"', repr(backend.url))
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
        timeout=WAIT_S, check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "completed Started; I will report back."
    assert lines[-1] == "assistant The build finished."


def test_p7_the_readme_client_example_shows_the_answer(backend: Backend, tmp_path: Path) -> None:
    program = block("From your own Python service", "python")
    with served(backend.url, "--token", "alice=secret-a") as server:
        result = subprocess.run(
            [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
            timeout=WAIT_S, check=False,
            env={**os.environ, "TIDINGS_URL": server.url, "TIDINGS_TOKEN": "secret-a"},
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["hello from Python"]
