"""U1: the examples in the library's docstrings run as written -- the scripted model's JSON rules
(its shell call with the arguments the shell tool takes), the runtime's own program and the
config file's -- on each backend."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

from tests.conftest import Backend
from tidings import Profile, Runtime, ScriptedModel, settings
from tidings.models import scripted
from tidings.runtime import root as runtime_module


def example(doc: str | None) -> str:
    """The literal block after a docstring's first ``::``, dedented."""
    assert doc is not None
    block = doc.split("::\n", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    return textwrap.dedent(block) + "\n"


async def run_in(folder: Path, imports: str, body: str) -> str:
    """``body`` run as an async program's main (after ``imports``) in ``folder``: its output."""
    program = (f"import asyncio\n{imports}\n\nasync def main() -> None:\n"
               + textwrap.indent(body, "    ") + "\nasyncio.run(main())\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program, cwd=folder,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_u1_the_scripted_models_docstring_rules_run_as_written(backend: Backend) -> None:
    model = ScriptedModel.from_json(example(scripted.__doc__))
    async with Runtime.open(backend.url, models=[model]) as runtime:
        made = await runtime.create_conversation(
            "alice", Profile(model=model.name, tools=("shell",)))
        conversation = made.conversation_id
        await runtime.post(conversation, "sleep a second, please")
        await runtime.settle(conversation)
        said = await runtime.transcript(conversation)
    [call] = [m for m in said if m.role == "assistant" and m.tool_calls]
    assert [(c["name"], c["arguments"]) for c in call.tool_calls] == [
        ("shell", {"command": "sleep 1"})]
    [result] = [m for m in said if m.role == "tool"]
    assert result.content.strip() == "exit 0"  # the shell ran it: no "command must be ..."
    assert (said[-1].role, said[-1].content) == ("assistant", "It finished.")


async def test_u1_the_runtimes_docstring_program_runs_as_written(
    backend: Backend, tmp_path: Path,
) -> None:
    body = example(runtime_module.__doc__).replace("sqlite:///agent.db", backend.url)
    out = await run_in(tmp_path, "from tidings import Profile, Runtime, ScriptedModel", body)
    assert "hello" in out


async def test_u1_the_config_docstring_program_runs_as_written(
    backend: Backend, tmp_path: Path,
) -> None:
    (tmp_path / "tidings.toml").write_text(
        f'[runtime]\ndatabase = "{backend.url}"\n\n[models.scripted]\nprovider = "scripted"\n\n'
        '[profiles.helper]\nmodel = "scripted"\n', "utf-8")
    body = example(settings.__doc__)
    out = await run_in(tmp_path, "import tidings", body + "print(conversation.profile.model)\n")
    assert out.split() == ["scripted"]
