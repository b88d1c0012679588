"""U4: ``tidings serve --config`` checks every profile's models and tools at start -- a real
server process refuses a mistyped tool or an unknown model in one line naming the file, the
line and the name, before anything is created; what the file, the built-in tools and its MCP
servers offer is accepted, and so are the tools a host adds through ``tidings.open``."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import tidings
from tests.conftest import Backend
from tests.service.test_cli import ENV, assert_one_line_error, free_port
from tidings import ConfigError, ScriptedModel, Tool, load_settings
from tidings.runtime.root import Runtime
from tidings.tools.builtin import BUILTIN_TOOLS

CONFIG = """\
tools = ["u4_tools:forecast"]

[runtime]
database = "agent.db"

[models.echo]
provider = "scripted"

[mcp.files]
command = ["python", "-m", "files_server"]

[profiles.assistant]
model = "echo"
tools = [
  "forecast",
  "shel",
]
"""

TOOLS = '''\
import tidings


async def _forecast(context, arguments):
    return "sunny"


forecast = tidings.Tool("forecast", "The weather.", _forecast,
                        {"type": "object", "properties": {"city": {"type": "string"}}})
'''


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "u4_tools.py").write_text(TOOLS, "utf-8")
    return tmp_path


def serve(config: Path, backend: Backend, env: Mapping[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    """``tidings serve --config`` run in the file's folder (where its database would be made;
    on PostgreSQL with ``--database``), to its end."""
    database = [] if backend.name == "sqlite" else ["--database", backend.url]
    result = subprocess.run(
        [sys.executable, "-m", "tidings", "serve", "--config", config.name,
         "--port", str(free_port()), *database],
        cwd=config.parent, capture_output=True, text=True, timeout=120, check=False,
        env={**{k: v for k, v in ENV.items()
                if k not in ("TIDINGS_DATABASE", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")},
             **(env or {})})
    assert "runtime started" not in result.stderr
    return result


def nothing_created(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir() if p.suffix != ".py"
                  and p.name != "__pycache__") == ["tidings.toml"]


def test_u4_serve_refuses_a_mistyped_tool_naming_the_file_line_and_name(
    folder: Path, backend: Backend
) -> None:
    config = folder / "tidings.toml"
    config.write_text(CONFIG, "utf-8")
    assert_one_line_error(
        serve(config, backend),
        'Error: tidings.toml:16: profile "assistant" names tool "shel", which is not '
        'configured (did you mean "shell"? known: forecast, shell, task_status, wait, '
        "task_output, tool_result_get, tool_result_list, restart, spawn, send, cancel, "
        "files.*)")
    nothing_created(folder)


def test_u4_serve_refuses_an_unknown_model_naming_the_file_line_and_name(
    folder: Path, backend: Backend
) -> None:
    config = folder / "tidings.toml"
    config.write_text(CONFIG.replace('model = "echo"', 'models = ["echo", "gtp"]')
                      .replace('"shel"', '"shell"'), "utf-8")
    assert_one_line_error(
        serve(config, backend),
        'Error: tidings.toml:13: profile "assistant" names model "gtp", which is not '
        "configured (known: echo)")
    nothing_created(folder)


def test_u4_serve_refuses_a_background_tool_the_profile_does_not_offer(
    folder: Path, backend: Backend
) -> None:
    config = folder / "tidings.toml"
    config.write_text(CONFIG.replace('"shel"', '"shell"') + 'background = ["wait", "shell"]\n',
                      "utf-8")
    assert_one_line_error(
        serve(config, backend),
        'Error: tidings.toml:18: profile "assistant" runs tool "wait" in the background, but '
        "its tools do not include it (its tools: forecast, shell)")
    nothing_created(folder)


def test_u4_tools_of_the_file_builtins_mcp_servers_and_the_host_are_accepted(
    folder: Path,
) -> None:
    config = folder / "tidings.toml"
    config.write_text(CONFIG.replace('"shel"', '"files.read", "spawn", "mine"'), "utf-8")
    with pytest.raises(ConfigError, match='names tool "mine"') as refused:
        load_settings(config, environ={})
    assert refused.value.line == 16
    settings = load_settings(config, environ={}, tools=["mine"])
    assert settings.profiles["assistant"].tools == ("forecast", "files.read", "spawn", "mine")
    config.write_text(CONFIG.replace('"shel"', '"filez.read"'), "utf-8")
    with pytest.raises(ConfigError, match=r'names tool "filez.read".*known: .*files\.\*'):
        load_settings(config, environ={})


async def test_u4_open_with_a_config_accepts_the_hosts_own_tools(
    folder: Path, backend: Backend
) -> None:
    async def _mine(context: tidings.ToolContext, arguments: Mapping[str, Any]) -> str:
        return "mine"

    mine = Tool("mine", "The host's own.", _mine, {"type": "object", "properties": {}})
    config = folder / "tidings.toml"
    config.write_text(CONFIG.replace('"shel"', '"mine"').replace(
        "[mcp.files]\ncommand = [\"python\", \"-m\", \"files_server\"]\n", ""), "utf-8")
    async with tidings.open(backend.url, config=config, tools=[mine]) as runtime:
        conversation = await runtime.create_conversation("alice", "assistant")
        assert conversation.profile.tools == ("forecast", "mine")
    with pytest.raises(ConfigError, match='names tool "mine"'):
        async with tidings.open(backend.url, config=config):
            pass


async def test_u4_the_builtin_tool_names_are_those_every_runtime_offers(
    backend: Backend,
) -> None:
    async with Runtime.open(backend.url, models=[ScriptedModel()]) as runtime:
        assert sorted(runtime.tools.names()) == sorted(BUILTIN_TOOLS)


DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
MISTAKES = {  # the documented error line's number -> the mistake made in the example
    19: ("", ""),  # OPENAI_API_KEY left unset
    44: ('tools = ["weather", "shell"]', 'tools = ["weather", "shel"]'),
    45: ('system = "You are', 'sytem = "You are'),
    10: ("port = 8080", "port 8080"),
}


def test_u4_the_documented_start_up_errors_are_what_serve_prints(
    tmp_path: Path, backend: Backend
) -> None:
    text = DOC.read_text("utf-8")
    example = re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)[0]
    (tmp_path / "my_tools.py").write_text(
        re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)[1], "utf-8")
    [documented] = re.findall(r"```text\n(Error: tidings\.toml.*?)```", text, flags=re.DOTALL)
    lines = documented.strip().splitlines()
    assert sorted(int(line.split(":")[2]) for line in lines) == sorted(MISTAKES)
    config = tmp_path / "tidings.toml"
    for line in lines:
        old, new = MISTAKES[int(line.split(":")[2])]
        config.write_text(example.replace(old, new) if old else example, "utf-8")
        keys = {"ANTHROPIC_API_KEY": "k", **({"OPENAI_API_KEY": "k"} if old else {})}
        assert_one_line_error(serve(config, backend, env=keys), line)
        nothing_created(tmp_path)
