"""U5: one plain vocabulary for users -- every command's ``--help`` and the API's own
documentation say nothing in the builders' private words (requirement ids, "materialized", bare
sequence numbers, internal counters). The demo's own words are checked where the demo runs,
in test_demo.py (one run serves its checks and these)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
from click.testing import CliRunner

from tests.conftest import Backend
from tidings.cli import main
from tidings.models.scripted import ScriptedModel
from tidings.runtime.root import Runtime
from tidings.service import create_app

REQUIREMENT_ID = re.compile(r"(?<![\w./-])[A-Z]{1,2}\d{1,2}(?![\w-])")
"""A requirement's id as the specification writes them: L2, M10, DL1."""

JARGON = re.compile("|".join((
    REQUIREMENT_ID.pattern,
    r"materiali[sz]", r"reconcil", r"Stop its mail", r"\bseq\b", r"\bsupplementary\b",
    r"\b(?:delivered|consumed|relayed|created)=", r"task_notification", r"restart_completed",
    r"<task_result", r"user-role", r"``",
)))
"""What a user should never have to read."""

LINE = re.compile(
    r"(?:\s*\d+\.\d\ds {2}\w+ +\S"  # a timeline entry: its time, who, what
    r"| {2}\S"  # a note under the timeline
    r"|─"  # a phase's heading
    r"|[✓✗] "  # a check
    r"|database "  # the first line
    r"|\d+ of \d+ checks passed · )")  # the summary
"""How every line the demo prints begins: a line that begins otherwise is a wrapped one."""


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's path below ``group``, the hidden ones left out."""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is None or command.hidden:
            continue
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def test_u5_every_help_speaks_plainly() -> None:
    runner = CliRunner()
    helps = {path: runner.invoke(main, [*path, "--help"], terminal_width=100)
             for path in [(), *commands(main)]}
    assert ("serve",) in helps
    assert ("demo",) in helps
    for path, result in helps.items():
        assert result.exit_code == 0, (path, result.output)
        assert JARGON.findall(result.output) == [], (path, result.output)


async def test_u5_the_api_docs_speak_plainly(backend: Backend) -> None:
    async with Runtime.open(backend.url, models=[ScriptedModel()]) as runtime:
        document = create_app(runtime, tokens={}).openapi()

    def words(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("summary", "description", "title") and isinstance(value, str):
                    yield value
                else:
                    yield from words(value)
        elif isinstance(node, list):
            for item in node:
                yield from words(item)

    said = list(words(document))
    assert len(said) > 100
    assert [text for text in said if REQUIREMENT_ID.search(text)] == []
