"""B18: an HTTP server behind OAuth 2.1 works through the SDK's OAuth client; its tokens are
kept sealed under the master key, survive a restart, are refreshed as they expire; a credential
taken away is said once, in the log and the feed, with what to do.

Against tests/mcp_servers/guarded.py: the ``mcp`` SDK's own authorization server and protected
resource (only its in-memory records are written there; its /authorize approves at once, so
the headless option follows it without a browser).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tests.mcp_servers.loopback import HERE, served
from tests.scenarios.test_b4_mcp import calling, conversation, turn, up
from tests.waiting import wait_until
from tidings import MasterKey, MCPOAuth, MCPServer, Runtime, ScriptedModel
from tidings.mcp.oauth import SealedTokens, unseal
from tidings.runtime.root import RuntimeConfig

GUARDED = HERE / "guarded.py"
KEY = MasterKey.generate()
CAP = timedelta(seconds=0.5)
HEADLESS = MCPOAuth(headless=True)
TTL_S = 3
"""How long the expiry test's access tokens live, in seconds."""


@dataclass
class Guarded:
    server: MCPServer
    log: Path
    revoked: Path

    @property
    def url(self) -> str:
        assert self.server.url is not None
        return self.server.url

    def grants(self) -> list[list[str]]:
        """The authorization server's grants so far: ``[kind, what it issued...]``."""
        if not self.log.exists():
            return []
        return [line.split() for line in self.log.read_text().splitlines() if line.strip()]

    def kinds(self) -> list[str]:
        return [grant[0] for grant in self.grants()]


@contextlib.contextmanager
def guarded_server(tmp_path: Path, *, ttl_s: int = 3600,
                   oauth: MCPOAuth = HEADLESS) -> Iterator[Guarded]:
    log, revoked = tmp_path / "grants.log", tmp_path / "revoked"
    env = {"GUARDED_LOG": str(log), "GUARDED_REVOKED": str(revoked), "GUARDED_TTL": str(ttl_s)}
    with served(GUARDED, "guarded", env=env, oauth=oauth,
                reconnect_base=timedelta(milliseconds=20), reconnect_cap=CAP) as server:
        yield Guarded(server, log, revoked)


@contextlib.asynccontextmanager
async def runtime(backend: Backend, server: MCPServer, *,
                  master_key: MasterKey | None = KEY) -> AsyncIterator[Runtime]:
    model = ScriptedModel(rules=calling("guarded.hello", {"name": "Ada"}, when="hello?"))
    async with Runtime.open(backend.url, models=[model], master_key=master_key,
                            config=RuntimeConfig(mcp_servers=(server,))) as rt:
        yield rt


async def hello(rt: Runtime, conv: str | None = None) -> tuple[str, Any]:
    """Call the guarded tool from a conversation (a new one unless given); its answer."""
    conv = conv or await conversation(rt, "guarded.hello")
    (result,) = await turn(rt, conv, "hello?")
    return conv, result


async def stored(rt: Runtime) -> Any:
    return await rt.store.read(lambda tx: tx.one("mcp_oauth_get", server="guarded"))


async def test_b18_a_token_is_got_once_kept_sealed_and_used_again_after_a_restart(
    backend: Backend, tmp_path: Path,
) -> None:
    with guarded_server(tmp_path) as guarded:
        async with runtime(backend, guarded.server) as rt:
            _, result = await hello(rt)
            assert (result.meta["is_error"], result.content) == (False, "hello Ada")
            row = await stored(rt)
        # Registered, authorized and given a token, once.
        assert guarded.kinds() == ["register", "authorize", "code"]
        (_, client_id), _, (_, access, refresh) = guarded.grants()
        # Sealed: the columns hold none of it in the clear; the master key opens it.
        assert row["url"] == guarded.url
        for secret in (access, refresh):
            assert secret not in row["tokens"]
        assert client_id not in row["client_info"]
        opened = unseal(KEY, "guarded", guarded.url, "tokens", row["tokens"])
        assert opened is not None
        assert opened["token"]["access_token"] == access
        # Another key opens nothing.
        assert unseal(MasterKey.generate(), "guarded", guarded.url, "tokens",
                      row["tokens"]) is None

        # A restart on the same database uses the kept token: no new authorization.
        async with runtime(backend, guarded.server) as rt:
            _, result = await hello(rt)
            assert result.content == "hello Ada"
            assert guarded.kinds() == ["register", "authorize", "code"]

            # The same server at another URL does not get them: they are forgotten.
            moved = MCPServer("guarded", url=guarded.url + "/elsewhere", oauth=HEADLESS)
            tokens = SealedTokens(moved, rt.store, lambda: KEY)
            assert await tokens.get_tokens() is None
            assert await stored(rt) is None


async def test_b18_an_expired_token_is_refreshed_also_after_a_restart(
    backend: Backend, tmp_path: Path,
) -> None:
    # Tokens live 3 s: long enough that one refreshed at a start is still good when the call
    # reaches the server on a loaded machine (an access token that expires in flight is
    # answered 401, and the SDK then authorizes afresh).
    with guarded_server(tmp_path, ttl_s=TTL_S) as guarded:
        async with runtime(backend, guarded.server) as rt:
            conv, result = await hello(rt)
            assert result.content == "hello Ada"
            assert guarded.kinds() == ["register", "authorize", "code"]
            # The token lives TTL_S by the wall clock, which the SDK's client and the
            # server both read (a manual clock cannot move it).
            await asyncio.sleep(TTL_S + 0.2)
            _, result = await hello(rt, conv)
            assert result.content == "hello Ada"
            assert guarded.kinds() == ["register", "authorize", "code", "refresh"]
            row = await stored(rt)
        refreshed = guarded.grants()[-1][1]
        opened = unseal(KEY, "guarded", guarded.url, "tokens", row["tokens"])
        assert opened is not None
        assert opened["token"]["access_token"] == refreshed  # the refreshed one is kept

        await asyncio.sleep(TTL_S + 0.2)  # the kept token expires while no runtime runs
        async with runtime(backend, guarded.server) as rt:
            _, result = await hello(rt)
            assert result.content == "hello Ada"
        # Refreshed at the start, never authorized again.
        assert guarded.kinds().count("authorize") == 1
        assert guarded.kinds()[-1] == "refresh"


async def test_b18_access_taken_away_is_said_once_in_the_log_and_the_feed(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "tidings.mcp")
    with guarded_server(tmp_path) as guarded:
        async with runtime(backend, guarded.server) as rt:
            conv, result = await hello(rt)
            assert result.content == "hello Ada"

            guarded.revoked.touch()  # tokens refused, and /authorize answers access_denied
            _, refused = await hello(rt, conv)
            error = json.loads(refused.content)
            assert (error["error"], error["server"]) == ("mcp_unavailable", "guarded")
            await wait_until(lambda: up(rt, "guarded") == 0.0, what="the server is down")
            # Asked again at the cap's pace, a few times, and still said only once.
            attempts = guarded.kinds().count("register")
            await asyncio.sleep(4 * CAP.total_seconds())
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1, errors
            assert "HTTP 401" in errors[0]
            assert "tidings mcp login guarded" in errors[0]
            assert "access" in errors[0]  # the authorization server's own words
            events = [e.data for e in await rt.events(conv) if e.type == "mcp_server_status"]
            assert len(events) == 1, events
            (said,) = events
            assert (said["status"], said["http_status"]) == ("unauthorized", 401)
            assert "tidings mcp login guarded" in said["reason"]
            assert guarded.kinds().count("register") == attempts  # the registration is kept

            # Let in again: connected at its next attempt.
            guarded.revoked.unlink()
            await wait_until(lambda: up(rt, "guarded") == 1.0, what="the server is back",
                             within_s=30)
            _, result = await hello(rt, conv)
            assert result.content == "hello Ada"


async def test_b18_without_a_master_key_tokens_live_in_memory_and_a_warning_says_so(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIDINGS_MASTER_KEY", raising=False)
    monkeypatch.delenv("TIDINGS_MASTER_KEY_FILE", raising=False)
    caplog.set_level(logging.WARNING, "tidings.mcp")
    with guarded_server(tmp_path) as guarded:
        async with runtime(backend, guarded.server, master_key=None) as rt:
            _, result = await hello(rt)
            assert result.content == "hello Ada"
            assert await stored(rt) is None  # nothing in the database
        warnings = [r.getMessage() for r in caplog.records
                    if "kept in memory only" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert "guarded" in warnings[0]
