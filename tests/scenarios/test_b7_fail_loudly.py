"""B7: a profile naming what the runtime does not have is refused when it is created or set,
naming what is unknown and what is registered, and nothing is written; a SQLite path that
cannot be opened is an error naming the path and the reason, and no directory is created."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tidings import Profile, Runtime, ScriptedModel, StoreError
from tidings.errors import DatabasePathError, UnknownModelOrToolError
from tidings.tools.registry import Tool, ToolContext


async def _note(ctx: ToolContext, args: Mapping[str, Any]) -> str:
    return "noted"


NOTE = Tool("note", "Take a note.", _note)


async def test_b7_unknown_model_is_refused_naming_it_and_the_registered_ones(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[ScriptedModel()], tools=[NOTE])
    with pytest.raises(UnknownModelOrToolError) as refused:
        await rt.create_conversation("alice", Profile(model="gpt-typo", fallbacks=("scripted",)))
    error = refused.value
    assert (error.code, error.unknown_models, error.unknown_tools) == (
        "unknown_model_or_tool", ("gpt-typo",), ())
    assert "scripted" in error.registered_models
    assert "'gpt-typo'" in error.message
    assert "registered: 'scripted'" in error.message
    assert await rt.conversations.list("alice") == []


async def test_b7_unknown_tool_is_refused_and_nothing_is_written(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[ScriptedModel()], tools=[NOTE])
    with pytest.raises(UnknownModelOrToolError) as refused:
        await rt.create_conversation("alice", Profile(model="scripted",
                                                      tools=("note", "nope", "shell")))
    error = refused.value
    assert (error.unknown_models, error.unknown_tools) == ((), ("nope",))
    assert {"note", "shell"} <= set(error.registered_tools)  # the built-ins count too
    assert "unknown tool(s) 'nope'" in error.message
    assert await rt.conversations.list("alice") == []
    # A profile of registered names is accepted.
    made = await rt.create_conversation("alice", Profile(model="scripted", tools=("note",)))
    assert [c.conversation_id for c in await rt.conversations.list("alice")] == [
        made.conversation_id]


async def test_b7_changing_a_profile_to_unknown_names_is_refused_and_keeps_the_old_one(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[ScriptedModel()], tools=[NOTE])
    conv = (await rt.create_conversation("alice", Profile(model="scripted"))).conversation_id
    events = len(await rt.events(conv))
    with pytest.raises(UnknownModelOrToolError) as refused:
        await rt.conversations.set_profile(conv, Profile(model="scripted", fallbacks=("gone",),
                                                         tools=("missing",)))
    assert (refused.value.unknown_models, refused.value.unknown_tools) == (
        ("gone",), ("missing",))
    assert (await rt.conversation(conv)).profile == Profile(model="scripted")
    assert len(await rt.events(conv)) == events  # no profile_changed


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(("where", "reason"), [
    ("missing-dir/tidings.db", "does not exist"),
    ("a-file/tidings.db", "is not a directory"),
    ("a-dir", "is a directory"),
])
async def test_b7_sqlite_path_that_cannot_be_opened_names_path_and_reason(
    tmp_path: Path, where: str, reason: str,
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "a-dir").mkdir()
    path = tmp_path / where
    before = _listing(tmp_path)
    with pytest.raises(DatabasePathError) as refused:
        async with Runtime.open(f"sqlite:///{path}", models=[ScriptedModel()]):
            pass
    error = refused.value
    assert isinstance(error, StoreError)
    assert error.path == str(path)
    assert reason in error.reason
    assert f"cannot open the database {str(path)!r}: " in error.message
    assert reason in error.message
    assert _listing(tmp_path) == before  # no directory was made


async def test_b7_sqlite_file_sqlite_cannot_open_is_a_path_error() -> None:
    # /proc takes no new files, whoever asks (root included): SQLite cannot open it.
    with pytest.raises(DatabasePathError) as refused:
        async with Runtime.open("/proc/tidings-b7.db", models=[ScriptedModel()]):
            pass
    assert refused.value.path == "/proc/tidings-b7.db"
    assert "cannot open" in refused.value.reason
