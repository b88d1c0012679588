"""A4 / B6 / B12: docs/models.md's worked example of a local OpenAI-compatible server runs as
written -- against a real server on loopback speaking chat completions, the reply streamed --
as a program and as the config file's entry (both backends)."""

from __future__ import annotations

import asyncio
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import tidings
from tests.conftest import Backend
from tests.models.loopback import LoopbackServer, Scripted, openai_chunk, openai_stream

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
DOCUMENTED_URL = "http://127.0.0.1:11434/v1"
PIECES = ("Hello", " there", ", Alice.")


def section() -> str:
    text = DOC.read_text("utf-8")
    start = text.index("## A local OpenAI-compatible server")
    return text[start:text.index("\n## ", start + 1)]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), flags=re.DOTALL)


def streamed_reply() -> Scripted:
    """The reply in pieces, a pause between them: each arrives in a chunk of its own."""
    chunks: list[dict[str, Any] | float] = []
    for i, piece in enumerate(PIECES):
        chunks += [openai_chunk(content=piece, role=i == 0), 0.05]
    return openai_stream([*chunks, openai_chunk(finish_reason="stop"),
                          openai_chunk(usage=(9, 3))])


def assert_streamed_request(server: LoopbackServer) -> None:
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "qwen2.5:7b"
    assert request.body["stream"] is True
    assert "max_tokens" in request.body  # what every such server knows


async def test_a4_the_documented_program_streams_from_a_local_server(
    backend: Backend, server: LoopbackServer, tmp_path: Path,
) -> None:
    program = blocks("python")[0]
    assert f'base_url="{DOCUMENTED_URL}"' in program
    assert 'tidings.open("sqlite:///agent.db"' in program
    program = (program.replace(DOCUMENTED_URL, f"{server.base_url}/v1")
               .replace("sqlite:///agent.db", backend.url))
    server.push(streamed_reply())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},  # no OPENAI_API_KEY: the keyless case the docs describe
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    streamed, final = out.decode().splitlines()
    assert streamed == "".join(PIECES)  # printed from the deltas, each piece once
    assert final == f"completed: {''.join(PIECES)}"
    assert_streamed_request(server)
    [request] = server.requests
    assert request.headers["authorization"] == "Bearer not-needed"


async def test_b6_the_documented_config_entry_streams_from_a_local_server(
    backend: Backend, server: LoopbackServer, tmp_path: Path,
) -> None:
    toml, snippet = blocks("toml")[0], blocks("python")[1]
    assert f'base_url = "{DOCUMENTED_URL}"' in toml
    (tmp_path / "tidings.toml").write_text(
        toml.replace(DOCUMENTED_URL, f"{server.base_url}/v1"), "utf-8")
    # The documented snippet as written, on the test's database, plus one line: ask.
    body = (snippet.replace("sqlite:///agent.db", backend.url)
            .replace('"tidings.toml"', repr(str(tmp_path / "tidings.toml")))
            + '    answer = await runtime.post(conv.conversation_id, "Say hello.", wait=True)\n'
            + "return answer\n")
    namespace: dict[str, Any] = {"tidings": tidings}
    exec("async def ask():\n" + textwrap.indent(body, "    "), namespace)
    server.push(streamed_reply())
    answer = await namespace["ask"]()
    # The server sent nothing but the stream's chunks: the reply is what they carried.
    assert (answer.status, answer.reply) == ("completed", "".join(PIECES))
    assert_streamed_request(server)
