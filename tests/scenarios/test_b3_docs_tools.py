"""B3 and docs/tools.md: its worked example (a typed tool registered on a runtime and named in
a profile) is run as written on each backend, and prints what the page says it prints."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import tidings
from tests.conftest import Backend
from tidings.types import ConversationId, RunId

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tools.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS.read_text("utf-8"), re.S)


async def test_b3_the_typed_tool_example_of_the_docs_prints_what_it_says(
    backend: Backend, tmp_path: Path
) -> None:
    example = blocks("python")[0]
    assert 'tidings.open("sqlite:///agent.db"' in example
    example = example.replace("sqlite:///agent.db", backend.url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", example, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    shown = blocks("text")[0]  # the output the page shows, right after the example
    assert out.decode().splitlines() == shown.splitlines()


async def test_b3_the_background_task_example_of_the_docs_hears_the_task_end(
    backend: Backend, tmp_path: Path
) -> None:
    example = blocks("python")[1]
    assert "ctx.start_task(" in example
    example = example.replace("sqlite:///agent.db", backend.url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", example, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["Building; I will tell you.", "The docs are built."]


async def test_b3_the_readme_tool_is_a_typed_tool_that_validates() -> None:
    readme = DOCS.parents[1] / "README.md"
    section = readme.read_text("utf-8").split("## Your own tools\n", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.S)
    scope: dict[str, Any] = {}
    exec(compile(snippet, "README.md", "exec"), scope)
    weather = scope["weather"]
    assert isinstance(weather, tidings.Tool)
    assert (weather.name, weather.description, weather.read_only) == (
        "weather", "The weather ahead in a city.", True)
    context = tidings.ToolContext(ConversationId("conv_1"), RunId("run_1"), "call_1")
    assert await weather.handler(context, {"city": "Delft"}) == '{"city":"Delft","sky":["clear"]}'
    refused = await weather.handler(context, {"town": "Delft"})
    assert isinstance(refused, tidings.ToolOutput)
    assert refused.is_error
