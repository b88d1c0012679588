"""B6: one config file -- a full file loads into ready models (each provider, called against a
loopback server), profiles and imported tools; every kind of mistake is refused with the file,
the line and the key at fault, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.models.loopback import (
    LoopbackServer,
    anthropic_end,
    anthropic_start,
    anthropic_stream,
    anthropic_text_block,
    openai_chunk,
    openai_stream,
)
from tidings import ConfigError, Settings, load_settings
from tidings.models.anthropic import AnthropicModel
from tidings.models.base import ModelRequest, PromptMessage
from tidings.models.openai import OpenAIChatModel
from tidings.models.scripted import ScriptedModel
from tidings.types import Profile


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


def write(tmp_path: Path, text: str, name: str = "tidings.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def request(text: str = "hello") -> ModelRequest:
    return ModelRequest(model="x", system="Be brief.", tools=(),
                        messages=(PromptMessage(role="user", content=text),))


def refused(path: Path, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ=env or {})
    assert caught.value.path == str(path)
    assert str(caught.value).startswith(str(path))
    return caught.value


FULL = """\
tools = ["tests.unit.b6_tools:weather"]

[runtime]
database = "agent.db"

[serve]
host = "127.0.0.1"
port = 9999
tokens_env = "MY_TOKENS"
access_log = true

[models.fast]
provider = "openai"
model = "served-gpt"
base_url = "{base}/v1"
api_key_env = "FAST_KEY"
temperature = 0.25
max_output_tokens = 321
context_chars = 50000

[models.careful]
provider = "anthropic"
model = "served-claude"
base_url = "{base}"
api_key_env = "CAREFUL_KEY"
temperature = 0.5
max_output_tokens = 654

[models.echo]
provider = "scripted"
rules = [{{ when = {{ text_contains = "ping" }}, reply = {{ text = "pong" }} }}]

[models.filed]
provider = "scripted"
rules = "rules.json"

[profiles.helper]
models = ["fast", "careful", "echo"]
tools = ["weather"]
system = "You help."
approval_mode = "writes"

[profiles.tester]
model = "echo"

[mcp.files]
command = ["python", "-m", "files_server"]
env = {{ ROOT = "/srv", TOKEN = "${{FILES_TOKEN}}" }}

[mcp.search]
url = "http://127.0.0.1:1/mcp"
headers = {{ Authorization = "Bearer ${{SEARCH_TOKEN}}" }}
"""

ENV = {"FAST_KEY": "sk-fast", "CAREFUL_KEY": "sk-careful", "FILES_TOKEN": "ft",
       "SEARCH_TOKEN": "st"}


async def test_b6_a_full_file_loads_models_profiles_tools_and_mcp_servers(
    tmp_path: Path, server: LoopbackServer
) -> None:
    (tmp_path / "rules.json").write_text(json.dumps(
        {"rules": [{"when": {"text_contains": "hi"}, "reply": {"text": "from the file"}}]}),
        "utf-8")
    settings = load_settings(write(tmp_path, FULL.format(base=server.base_url)), environ=ENV)
    try:
        await _check_full(settings, server)
    finally:
        for model in settings.models.values():
            if isinstance(model, OpenAIChatModel | AnthropicModel):
                await model.aclose()


def header(server: LoopbackServer, name: str) -> str:
    headers = {k.lower(): v for k, v in server.requests[-1].headers.items()}
    return headers[name]


async def _check_full(settings: Settings, server: LoopbackServer) -> None:

    assert settings.database == "agent.db"
    assert (settings.host, settings.port, settings.tokens_env, settings.access_log) == (
        "127.0.0.1", 9999, "MY_TOKENS", True)
    assert set(settings.models) == {"fast", "careful", "echo", "filed"}
    assert settings.profiles["helper"] == Profile(
        model="fast", fallbacks=("careful", "echo"), tools=("weather",), system="You help.",
        approval_mode="writes")
    assert settings.profiles["tester"] == Profile(model="echo")
    assert [t.name for t in settings.tools] == ["weather"]

    # The openai model: the provider's model name, the key from its variable, temperature
    # and the output limit go over the wire.
    server.push(openai_stream([openai_chunk(content="hi there", role=True),
                               openai_chunk(finish_reason="stop"), openai_chunk(usage=(3, 2))]))
    reply = await settings.models["fast"].complete(request())
    assert reply.text == "hi there"
    sent = server.requests[-1]
    assert sent.body["model"] == "served-gpt"
    assert sent.body["temperature"] == 0.25
    assert sent.body["max_tokens"] == 321
    assert header(server, "authorization") == "Bearer sk-fast"
    fast = settings.models["fast"]
    assert isinstance(fast, OpenAIChatModel)
    assert fast.context_chars == 50000

    server.push(anthropic_stream([anthropic_start(), *anthropic_text_block(0, ["careful"]),
                                  *anthropic_end()]))
    reply = await settings.models["careful"].complete(request())
    assert reply.text == "careful"
    sent = server.requests[-1]
    assert (sent.body["model"], sent.body["temperature"], sent.body["max_tokens"]) == (
        "served-claude", 0.5, 654)
    assert header(server, "authorization") == "Bearer sk-careful"

    assert (await settings.models["echo"].complete(request("ping"))).text == "pong"
    assert (await settings.models["echo"].complete(request("other"))).text == "other"
    assert (await settings.models["filed"].complete(request("hi"))).text == "from the file"
    assert isinstance(settings.models["echo"], ScriptedModel)
    assert settings.models["echo"].name == "echo"

    files, search = settings.mcp_servers
    assert (files.name, files.command, files.args) == ("files", "python", ("-m", "files_server"))
    assert files.env == {"ROOT": "/srv", "TOKEN": "ft"}
    assert (search.name, search.url, search.command) == ("search", "http://127.0.0.1:1/mcp", None)
    assert search.headers == {"Authorization": "Bearer st"}


def test_b6_a_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.echo]\nprovider = "scripted"\nrules = [\n\n[profiles\n')
    error = refused(path)
    assert error.line is not None
    assert error.line == 5
    assert str(error) == f"{path}:5: not valid TOML: Invalid value (column 2)"


def test_b6_an_unknown_key_names_its_path_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.echo]\nprovider = "scripted"\n\n[profiles.p]\n'
                           'model = "echo"\nsytem = "typo"\n')
    error = refused(path)
    assert (error.line, error.key) == (6, "profiles.p.sytem")
    assert str(error) == f"{path}:6: profiles.p.sytem: unknown key"


def test_b6_a_tools_list_under_a_table_is_an_unknown_key_of_that_table(tmp_path: Path) -> None:
    path = write(tmp_path, '[serve]\nport = 1\ntools = ["a.b:c"]\n')
    error = refused(path)
    assert (error.line, error.key) == (3, "serve.tools")


def test_b6_a_literal_api_key_is_refused_at_its_own_line_and_says_why(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.fast]\nprovider = "openai"\nmodel = "gpt"\n'
                           'api_key = "sk-secret"\n')
    error = refused(path)
    assert (error.line, error.key) == (4, "models.fast.api_key")
    assert str(error).startswith(f"{path}:4: models.fast.api_key: a literal API key")
    assert "literal API key is not allowed" in str(error)
    assert "api_key_env" in str(error)
    assert "sk-secret" not in str(error)


def test_b6_a_literal_api_key_written_as_a_dotted_key_is_refused_at_its_line(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, '[models]\nfast.provider = "anthropic"\nfast.model = "claude"\n'
                           '\nfast.api_key = "sk-ant-secret"\n')
    error = refused(path)
    assert (error.line, error.key) == (5, "models.fast.api_key")
    assert "sk-ant-secret" not in str(error)


def test_b6_a_key_pasted_into_api_key_env_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.fast]\nprovider = "openai"\nmodel = "gpt"\n'
                           'api_key_env = "sk-abc123"\n')
    error = refused(path)
    assert (error.line, error.key) == (4, "models.fast.api_key_env")
    assert "names an environment variable" in str(error)


def test_b6_a_missing_environment_variable_names_it_and_the_model(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.fast]\nprovider = "openai"\nmodel = "gpt"\n'
                           'api_key_env = "FAST_KEY"\n')
    error = refused(path, env={})
    assert (error.line, error.key) == (4, "models.fast.api_key_env")
    assert "FAST_KEY" in str(error)
    assert "'fast'" in str(error)


@pytest.mark.parametrize(("spec", "expected"), [
    ("tests.unit.b6_tools", "not an import path"),
    ("tests.unit.no_such_module:tool", "no module named 'tests.unit.no_such_module'"),
    ("tests.unit.b6_tools:missing", "has no attribute 'missing'"),
    ("tests.unit.b6_tools:NOT_A_TOOL", "is a int, not a tool or a function"),
])
def test_b6_a_bad_tool_import_path_is_refused_with_the_reason(
    tmp_path: Path, spec: str, expected: str
) -> None:
    path = write(tmp_path, f'# my tools\ntools = ["{spec}"]\n')
    error = refused(path)
    assert (error.line, error.key) == (2, "tools")
    assert expected in str(error)


def test_b6_a_plain_typed_function_loads_as_a_tool(tmp_path: Path) -> None:
    path = write(tmp_path, 'tools = ["tests.unit.b6_tools:forecast"]\n')
    (loaded,) = load_settings(path, environ={}).tools
    assert loaded.name == "forecast"
    assert loaded.description == "The forecast for a city."
    assert loaded.parameters["required"] == ["city"]
    assert set(loaded.parameters["properties"]) == {"city", "days"}


def test_b6_a_function_that_cannot_be_a_tool_is_refused_at_its_key(tmp_path: Path) -> None:
    path = write(tmp_path, '# my tools\ntools = ["tests.unit.b6_tools:spread"]\n')
    error = refused(path)
    assert (error.line, error.key) == (2, "tools")
    assert "'tests.unit.b6_tools:spread' cannot be a tool" in str(error)
    assert "*args" in str(error)


def test_b6_a_profile_naming_an_unknown_model_alias_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.echo]\nprovider = "scripted"\n\n[profiles.p]\n'
                           'models = ["echo", "gpt-4o"]\n')
    error = refused(path)
    assert error.line == 5
    assert 'profile "p" names model "gpt-4o", which is not configured' in str(error)


def test_b6_a_wrong_value_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.fast]\nprovider = "openai"\nmodel = "gpt"\n'
                           'temperature = "hot"\n')
    error = refused(path)
    assert (error.line, error.key) == (4, "models.fast.temperature")
    path = write(tmp_path, '[models.fast]\nprovider = "mistral"\n')
    assert refused(path).key == "models.fast.provider"
    path = write(tmp_path, '[models.fast]\nprovider = "openai"\n')
    error = refused(path)
    assert error.key == "models.fast"
    assert "needs model" in str(error)


def test_b6_a_missing_rules_file_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.echo]\nprovider = "scripted"\nrules = "nope.json"\n')
    error = refused(path)
    assert (error.line, error.key) == (3, "models.echo.rules")
    assert "nope.json" in str(error)
    missing = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_settings(missing)


def test_b6_an_mcp_server_needs_one_transport_and_its_variables(tmp_path: Path) -> None:
    path = write(tmp_path, '[mcp.both]\ncommand = "x"\nurl = "http://h"\n')
    assert refused(path).key == "mcp.both"
    path = write(tmp_path, '[mcp.s]\nurl = "http://h"\nheaders = { A = "${NOPE}" }\n')
    error = refused(path)
    assert error.key == "mcp.s.headers.A"
    assert error.line == 3
    assert "NOPE" in str(error)
