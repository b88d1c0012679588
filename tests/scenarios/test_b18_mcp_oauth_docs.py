"""The OAuth examples of docs/mcp.md run as written: the config file and ``tidings mcp login``
against the ``mcp`` SDK's own authorization server (tests/mcp_servers/guarded.py), a person's
browser played by a test that follows the printed URL; then the runtime uses the tokens the
login kept (on each backend). And the service account's table builds the declaration it says.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from pathlib import Path

import httpx
import pytest

import tidings
from tests.conftest import Backend
from tests.mcp_servers.loopback import free_port
from tests.scenarios.test_b4_mcp import calling, conversation, turn
from tests.scenarios.test_b18_mcp_oauth import KEY, guarded_server
from tidings import MCPOAuth, ScriptedModel, load_settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
SECTION = DOCS.read_text("utf-8").split("## Servers behind OAuth", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```$", SECTION, flags=re.S | re.M)
TOML = [text for kind, text in BLOCKS if kind == "toml"]
COMMANDS = [text for kind, text in BLOCKS if not kind]


async def test_b18_the_login_of_the_docs_keeps_tokens_a_runtime_then_uses(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    login, serve = COMMANDS[0].splitlines()[1:]
    assert login == "tidings mcp login search --config tidings.toml"
    assert serve == "tidings serve --config tidings.toml"
    port = free_port()
    with guarded_server(tmp_path, oauth=MCPOAuth()) as guarded:
        config = tmp_path / "tidings.toml"
        config.write_text(TOML[0].replace("https://mcp.example.com/mcp", guarded.url)
                          .replace(":33418/", f":{port}/"), "utf-8")
        model = ScriptedModel(rules=calling("search.hello", {"name": "Ada"}, when="hello?"))

        # Before the login, the service cannot get a token: it says to log in.
        caplog.set_level(logging.ERROR, "tidings.mcp")
        async with tidings.open(backend.url, config=config, models=[model],
                                master_key=KEY) as rt:
            assert not rt.mcp["search"].up
        (said,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert "HTTP 401" in said
        assert "tidings mcp login search" in said

        # The login, a person's browser played by following the URL it prints.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", *login.split()[1:], "--database", backend.url,
            cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "TIDINGS_MASTER_KEY": KEY.secret.hex(), "COLUMNS": "200"})
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            while not (line := (await proc.stdout.readline()).decode()).startswith("http"):
                assert line, "the login printed no URL"
            async with httpx.AsyncClient(follow_redirects=True) as browser:
                page = await browser.get(line.strip())
            assert page.status_code == 200
            assert "authorized" in page.text
            out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert "authorized: MCP server search lists 1 tools" in out.decode()
        assert guarded.kinds().count("authorize") == 1

        # The service uses the kept tokens: no new authorization.
        async with tidings.open(backend.url, config=config, models=[model],
                                master_key=KEY) as rt:
            conv = await conversation(rt, "search.hello")
            (result,) = await turn(rt, conv, "hello?")
            assert result.content == "hello Ada"
        assert guarded.kinds().count("authorize") == 1


def test_b18_the_service_account_of_the_docs_is_a_client_credentials_declaration(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text(TOML[1], "utf-8")
    settings = load_settings(config, environ={"REPORTS_CLIENT_SECRET": "s3cret"})
    (spec,) = settings.mcp_servers
    server = spec.server()
    assert server.url == "https://reports.example.com/mcp"
    assert server.oauth == MCPOAuth(
        grant="client_credentials", client_id="tidings-agent", client_secret="s3cret",
        scopes=("reports:read",), issuer="https://auth.example.com")
    assert "s3cret" not in repr(server.oauth)
