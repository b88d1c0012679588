"""U1: the scripted model's rule language is documented, and the docs' example runs as written:
its JSON rules (through the file the docs save them to) and its program, on each backend."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import Backend
from tidings import InvalidInputError, ScriptedModel
from tidings.models import scripted

DOC = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text("utf-8")
SECTION = DOC.split("\n## The scripted model", 1)[1].split("\n## ", 1)[0]


def block(language: str) -> str:
    [found] = [part.split("```", 1)[0] for part in SECTION.split(f"```{language}\n")[1:]]
    return found


def test_u1_the_docs_name_every_condition_and_reply_key() -> None:
    for key in (*scripted._WHEN_KEYS, *scripted._REPLY_KEYS, *scripted._USAGE_KEYS):
        assert f"`{key}`" in SECTION, f"docs/models.md does not describe {key!r}"
    with pytest.raises(InvalidInputError, match="rule 0"):
        ScriptedModel.from_json(json.dumps({"rules": [{"when": {"txt": "x"},
                                                       "reply": {"text": "y"}}]}))


async def test_u1_the_docs_rules_and_program_run_as_written(
    backend: Backend, tmp_path: Path,
) -> None:
    (tmp_path / "rules.json").write_text(block("json"), "utf-8")
    program = block("python").replace("sqlite:///agent.db", backend.url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["Started; I will report back.", "The build finished."]
