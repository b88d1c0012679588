"""B6: the worked example of docs/config.md is the file these tests run -- ``tidings serve
--config`` answers a turn with its scripted model, profile and imported tool (a real server
process, both backends: the database from the file, or from ``--database``), as does
``tidings.open(url, config=path)``; a malformed file stops the server at start in one line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import tidings
from tests.conftest import Backend
from tests.mcp_servers import WEATHER
from tests.service.test_cli import ENV, WAIT_S, Lines, assert_one_line_error, free_port
from tests.service.test_cli import tidings as run_cli
from tests.waiting import wait_serving
from tidings import UnknownProfileError

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
SECRETS = {"OPENAI_API_KEY": "sk-test-openai", "ANTHROPIC_API_KEY": "sk-test-anthropic",
           "TIDINGS_TOKENS": "alice=tok-a", "SEARCH_TOKEN": "st"}


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text("utf-8"), flags=re.DOTALL)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """The documented file and its tools module, written where the docs say they sit."""
    config = tmp_path / "tidings.toml"
    config.write_text(blocks("toml")[0], "utf-8")
    (tmp_path / "my_tools.py").write_text(blocks("python")[1], "utf-8")
    return config


def test_b6_the_documented_mcp_tables_parse(tmp_path: Path) -> None:
    config = tmp_path / "mcp.toml"
    config.write_text(blocks("toml")[1], "utf-8")
    files, search = tidings.load_settings(config, environ=SECRETS).mcp_servers
    assert (files.command, files.args, files.env) == (
        "python", ("-m", "files_server"), {"ROOT": "/srv/files"})
    assert search.headers == {"Authorization": "Bearer st"}


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("secrets")
async def test_b6_open_with_a_config_file_answers_with_its_profile_and_tool(
    example: Path, backend: Backend
) -> None:
    async with tidings.open(backend.url, config=example) as runtime:
        assert set(runtime.models) == {"gpt", "claude", "local", "echo"}
        conversation = await runtime.create_conversation("alice", "offline")
        assert conversation.profile.model == "echo"
        answer = await runtime.post(conversation.conversation_id, "the weather?", wait=True,
                                    timeout=WAIT_S)
        assert answer.reply == "The forecast is in."
        transcript = await runtime.transcript(conversation.conversation_id)
        assert any(m.role == "tool" and m.content == "sunny in Lyon" for m in transcript)
        with pytest.raises(UnknownProfileError, match="'nope'"):
            await runtime.create_conversation("alice", "nope")


@pytest.fixture
def served(example: Path, backend: Backend) -> Iterator[tuple[str, Lines]]:
    """``tidings serve --config`` in the example's directory: on SQLite with the file's own
    database, on PostgreSQL with ``--database``."""
    port = free_port()
    database = [] if backend.name == "sqlite" else ["--database", backend.url]
    env = {k: v for k, v in ENV.items() if k != "TIDINGS_DATABASE"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tidings", "serve", "--config", str(example), "--port", str(port),
         *database],
        cwd=example.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**env, **SECRETS},
    )
    assert process.stderr is not None
    logs = Lines(process.stderr)
    try:
        logs.wait_for("runtime started")
        url = f"http://127.0.0.1:{port}"
        listening(url)  # the runtime is up before the port listens
        yield url, logs
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(WAIT_S)


def listening(url: str) -> None:
    """Until the server answers /health (it logs "runtime started" before it listens)."""
    wait_serving(url)


def test_b6_serve_with_the_documented_config_answers_a_turn(
    served: tuple[str, Lines], example: Path, backend: Backend
) -> None:
    url, _ = served
    auth = {"Authorization": "Bearer tok-a"}
    created = httpx.post(f"{url}/v1/conversations", json={"profile": "offline"}, headers=auth,
                         timeout=WAIT_S)
    assert created.status_code == 201, created.text
    assert created.json()["profile"]["tools"] == ["weather"]
    conversation = created.json()["conversation_id"]
    answered = httpx.post(f"{url}/v1/conversations/{conversation}/inputs?wait=30",
                          json={"content": "the weather?"}, headers=auth, timeout=WAIT_S + 5)
    assert answered.json()["reply"] == "The forecast is in.", answered.text
    unknown = httpx.post(f"{url}/v1/conversations", json={"profile": "nope"}, headers=auth,
                         timeout=WAIT_S)
    assert unknown.status_code == 422
    assert unknown.json()["code"] == "unknown_profile"
    if backend.name == "sqlite":  # the database the file names, relative to where it runs
        assert (example.parent / "tidings.db").exists()


def test_b6_serve_refuses_a_malformed_config_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text('[models.echo]\nprovider = "scripted"\ncolour = "blue"\n', "utf-8")
    result = run_cli("serve", "--config", str(config), "--port", str(free_port()))
    assert_one_line_error(result, f"{config}:3: models.echo.colour: unknown key")
    config.write_text('[models.gpt]\nprovider = "openai"\nmodel = "x"\n'
                      'api_key_env = "B6_UNSET_KEY"\n', "utf-8")
    result = run_cli("serve", "--config", str(config), "--port", str(free_port()))
    assert_one_line_error(result, "B6_UNSET_KEY (the API key of model 'gpt') is not set")
    config.write_text('[models.gpt]\nprovider = "openai"\nmodel = "x"\n\n'
                      'api_key = "sk-b6-inline"\n', "utf-8")
    result = run_cli("serve", "--config", str(config), "--port", str(free_port()))
    assert_one_line_error(result, f"{config}:5: models.gpt.api_key: a literal API key")
    assert "sk-b6-inline" not in result.stdout + result.stderr


async def test_b6_b4_a_config_files_mcp_server_runs_and_its_tools_are_offered(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tidings.toml"
    command = json.dumps([sys.executable, str(WEATHER)])
    config.write_text(f"[mcp.weather]\ncommand = {command}\n", "utf-8")
    async with tidings.open(str(tmp_path / "t.db"), config=config,
                            models=[tidings.ScriptedModel()]) as rt:
        assert "weather.forecast" in rt.tools.names()


def test_b6_the_readme_config_loads(tmp_path: Path) -> None:
    readme = DOC.parents[1] / "README.md"
    section = readme.read_text("utf-8").split("## One config file\n", 1)[1].split("\n## ")[0]
    found = re.search(r"```toml\n(.*?)```", section, re.S)
    assert found is not None
    config = tmp_path / "tidings.toml"
    config.write_text(found.group(1), "utf-8")
    (tmp_path / "my_tools.py").write_text(blocks("python")[1], "utf-8")
    settings = tidings.load_settings(config, environ=SECRETS)
    assert settings.profiles["assistant"].model == "gpt"
    assert [t.name for t in settings.tools] == ["weather"]


def test_u3_create_and_chat_take_a_profile_of_the_config_by_its_name(
    served: tuple[str, Lines],
) -> None:
    url, _ = served
    where = ("--url", url, "--token", "tok-a")
    made = run_cli("create", *where, "--profile", "offline")
    assert made.returncode == 0, made.stderr
    conversation = made.stdout.strip()
    got = httpx.get(f"{url}/v1/conversations/{conversation}",
                    headers={"Authorization": "Bearer tok-a"}, timeout=WAIT_S)
    assert got.json()["profile"]["tools"] == ["weather"]
    chatted = subprocess.run(
        [sys.executable, "-m", "tidings", "chat", *where, "--profile", "offline"],
        input="the weather?\n", capture_output=True, text=True, timeout=WAIT_S * 2,
        env=ENV, check=False)
    assert chatted.returncode == 0, chatted.stderr
    assert "The forecast is in." in chatted.stdout
    mixed = run_cli("create", *where, "--profile", "offline", "--tool", "shell")
    assert mixed.returncode != 0
    assert "a named profile brings its own tools" in mixed.stderr
    unknown = run_cli("create", *where, "--profile", "nope")
    assert_one_line_error(unknown, "unknown_profile")
