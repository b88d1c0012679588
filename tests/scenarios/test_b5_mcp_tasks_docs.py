"""The background MCP task example of docs/mcp.md runs as written (on each backend)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from tests.conftest import Backend

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"


def section_blocks(heading: str) -> list[str]:
    """The Python blocks of one section of the page."""
    text = DOCS.read_text("utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [part.split("```", 1)[0] for part in section.split("```python\n")[1:]]


async def test_b5_the_docs_background_task_example_runs_and_its_end_is_told(
    backend: Backend, tmp_path: Path,
) -> None:
    server, program = section_blocks("Background MCP tasks")
    assert 'tidings.open("sqlite:///agent.db"' in program
    (tmp_path / "bakery_server.py").write_text(server, "utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program.replace("sqlite:///agent.db", backend.url), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    printed = out.decode().splitlines()
    assert printed[0] == "The bread is in the oven."
    assert re.fullmatch(r"task bg-[0-9a-f]+ exited", printed[1]), printed
    assert printed[2:] == ["bakery bake_bread exited two loaves, golden", "The bread is ready."]
