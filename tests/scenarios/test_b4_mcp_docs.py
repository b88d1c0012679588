"""The worked example of docs/mcp.md runs as written (on each backend)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.conftest import Backend

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"


async def test_b4_the_worked_example_of_the_docs_calls_the_server_s_tool(
    backend: Backend, tmp_path: Path,
) -> None:
    blocks = [part.split("```", 1)[0] for part in DOCS.read_text("utf-8").split("```python\n")[1:]]
    server, program = blocks[0], blocks[1]
    assert 'tidings.open("sqlite:///agent.db"' in program
    (tmp_path / "weather_server.py").write_text(server, "utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program.replace("sqlite:///agent.db", backend.url), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    printed = out.decode().splitlines()
    assert "tool Oslo: sunny for 2 day(s)" in printed
    assert printed[-1] == "Pack sunglasses."
