"""U8 from the command line: ``tidings archive`` / ``unarchive`` / ``profile`` -- docs/cli.md's
commands run as written against a real ``tidings serve`` whose config names a profile, and the
same over the database itself, on both backends."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import Backend
from tests.service.documented import arguments, cli_section
from tests.service.test_cli import WAIT_S, assert_one_line_error, served, tidings

TOKEN = "tok-alice"
CONFIG = """
[models.scripted]
provider = "scripted"

[profiles.assistant]
model = "scripted"
tools = ["shell"]
"""


def test_u8_the_documented_archive_and_profile_commands_answer_as_documented(
    backend: Backend, tmp_path: Path
) -> None:
    config = tmp_path / "tidings.toml"
    config.write_text(CONFIG, "utf-8")
    commands, printed = cli_section("Archiving and changing a profile")
    with served(backend.url, "--config", str(config), "--token", f"alice={TOKEN}") as server:
        made = tidings("create", "--url", server.url, "--token", TOKEN)
        assert made.returncode == 0, made.stderr
        conversation = made.stdout.strip()
        written = {"http://localhost:8080": server.url, "secret-a": TOKEN,
                   "conv_…": conversation}
        shown: list[str] = []
        for line in commands:
            command = arguments(line, written)
            done = tidings(*command)
            refused = command[0] == "post" or command[-1] == "assistan"
            assert done.returncode == (1 if refused else 0), done.stderr
            shown += (done.stdout + done.stderr).splitlines()
        got = httpx.get(f"{server.url}/v1/conversations/{conversation}/events.json",
                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT_S)
        kinds = [e["type"] for e in got.json()["items"]]
    assert "\n".join(shown).replace(conversation, "conv_…").splitlines() == printed
    assert kinds.count("conversation_status") == 2
    assert kinds.count("profile_changed") == 1  # the misspelled name changed nothing


def test_u8_archive_unarchive_and_profile_over_the_database(backend: Backend) -> None:
    made = tidings("create", "--database", backend.url, "--owner", "alice")
    assert made.returncode == 0, made.stderr
    conversation = made.stdout.strip()
    on = ("--database", backend.url)
    archived = tidings("archive", *on, conversation)
    assert archived.stdout == f"{conversation} archived (model scripted; tools none)\n"
    undone = tidings("unarchive", *on, conversation)
    assert undone.stdout == f"{conversation} active (model scripted; tools none)\n"
    changed = tidings("profile", *on, conversation, '{"model": "scripted"}', "--tool", "shell")
    assert changed.stdout == f"{conversation} active (model scripted; tools shell)\n"
    assert_one_line_error(tidings("profile", *on, conversation, "assistant"),
                          "Error: invalid_input: a profile by its name is the service's "
                          "(--url): with --database, write it as JSON")
    assert_one_line_error(tidings("archive", *on, "conv_nope"),
                          "Error: unknown_conversation: no conversation 'conv_nope'")
