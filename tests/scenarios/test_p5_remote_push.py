"""P5: tidings asks a remote agent to push its task's news, and a push has the task asked about
at once -- a latency hint, never the rule. ``tidings serve`` (both backends) is the parent; its
remote child is tests/a2a_agents/remote.py (the ``a2a-sdk``'s own server, push sender and config
store), which does not stream, and which tidings would poll only every two minutes: an answer
within seconds is the push's doing. A push without the token the agent was given is refused,
the same as one for a request that does not exist, and changes nothing."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.a2a_agents import TOKEN, TOKEN_ENV, received, remote_agent
from tests.conftest import Backend
from tests.mcp_servers.loopback import free_port
from tests.service.test_cli import served
from tests.waiting import eventually
from tidings.push.notifications import TOKEN_HEADER

WITHIN_S = 20.0
HEADERS = {"Authorization": "Bearer tok-alice"}
CONFIG = """
[models.boss]
provider = "scripted"

[[models.boss.rules]]
when = {{ text_equals = "go" }}
reply.tool_calls = [{{ name = "spawn", arguments = {{ agent = "helper", brief = "{brief}" }} }}]

[[models.boss.rules]]
when = {{ tool_result = "spawn" }}
reply = {{ text = "Delegated." }}

[[models.boss.rules]]
when = {{ text_contains = "done: summarise the news" }}
reply = {{ text = "Read it." }}

[profiles.boss]
model = "boss"
tools = ["spawn"]

[agents.helper]
url = "{url}"
token_env = "{token_env}"
poll_seconds = 120
subscribe = false
push_url = "http://127.0.0.1:{port}"

[push]
allow_private = true
"""


async def test_p5_a_remote_agents_push_has_its_task_asked_about_at_once(
        backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    state = tmp_path / "remote"
    state.mkdir()
    port = free_port()
    with remote_agent(state, streaming=False) as agent:
        config = tmp_path / "tidings.toml"
        config.write_text(CONFIG.format(url=agent.url, token_env=TOKEN_ENV, port=port,
                                         brief="summarise the news"), "utf-8")
        with served(backend.url, "--config", str(config), "--token", "alice=tok-alice",
                    port=port, env={TOKEN_ENV: TOKEN}) as server:
            async with httpx.AsyncClient(base_url=server.url, headers=HEADERS,
                                         timeout=WITHIN_S) as http:
                made = await http.post("/v1/conversations", json={"profile": "boss"})
                assert made.status_code == 201, made.text
                conv = made.json()["conversation_id"]
                posted = await http.post(f"/v1/conversations/{conv}/inputs?wait=10",
                                         json={"content": "go"})
                assert posted.status_code == 200, posted.text

                async def last() -> str:
                    page = (await http.get(f"/v1/conversations/{conv}/transcript")).json()
                    return str(page["items"][-1]["content"]) if page["items"] else ""

                await eventually(last, lambda said: said == "Read it.",
                                 what="the parent's turn on the pushed answer",
                                 within_s=WITHIN_S)
                [request] = (await http.get(f"/v1/conversations/{conv}/children")).json()[
                    "items"]
                hook = f"/a2a-hooks/children/{request['request_id']}"
                for headers in ({TOKEN_HEADER: "not-the-token"}, {}):
                    refused = await http.post(hook, headers=headers, json={})
                    assert refused.status_code == 404, refused.text
                unknown = await http.post("/a2a-hooks/children/creq-none",
                                          headers={TOKEN_HEADER: "x" * 32}, json={})
                assert unknown.status_code == 404
                assert unknown.json()["code"] == refused.json()["code"]
    assert received(state) == ["summarise the news"]  # sent once
