"""The examples of docs/a2a.md's "Delegating to a remote agent" run as written: the config
table loads into a RemoteAgent, and the program delegates to the test suite's remote agent
(tests/a2a_agents/remote.py) and prints its answer (on each backend)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from datetime import timedelta
from pathlib import Path

from tests.a2a_agents import TOKEN, remote_agent
from tests.conftest import Backend
from tidings import RemoteAgent, load_settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "a2a.md"


def section() -> str:
    text = DOCS.read_text("utf-8")
    return text.split("## Delegating to a remote agent", 1)[1].split("\n## ", 1)[0]


def test_p5_the_docs_config_table_declares_the_agent(tmp_path: Path) -> None:
    [table] = re.findall(r"```toml\n(.*?)```", section(), re.S)
    (tmp_path / "tidings.toml").write_text(table, "utf-8")
    settings = load_settings(tmp_path / "tidings.toml", environ={})
    assert settings.agents == (RemoteAgent(
        "helper", "https://helper.example.com", token_env="HELPER_TOKEN",
        poll=timedelta(seconds=1), timeout=timedelta(seconds=30),
        push_url="https://tidings.example.com"),)
    assert settings.agents[0].hook("creq-1") == (
        "https://tidings.example.com/a2a-hooks/children/creq-1")
    (tmp_path / "tidings.toml").write_text(table.replace("subscribe = true", "subscribe = false"))
    [polled] = load_settings(tmp_path / "tidings.toml", environ={}).agents
    assert not polled.subscribe


async def test_p5_the_docs_program_delegates_to_a_remote_agent(backend: Backend,
                                                              tmp_path: Path) -> None:
    [program] = re.findall(r"```python\n(.*?)```", section(), re.S)
    assert 'tidings.open("sqlite:///agent.db"' in program
    with remote_agent(tmp_path) as agent:
        code = program.replace("sqlite:///agent.db", backend.url).replace(
            "http://127.0.0.1:9999", agent.url)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, cwd=tmp_path, env={**os.environ, "HELPER_TOKEN": TOKEN},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["completed done: summarise the news"]
