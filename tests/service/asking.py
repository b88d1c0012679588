"""A ``tidings serve`` whose MCP servers ask a person and report progress: the FastMCP booking
desk (tests/mcp_servers/desk.py: ``desk.book`` asks how many seats) and the bulky server
(tests/mcp_servers/bulky.py: ``bulky.steps`` reports progress), declared in a config file as a
person would declare them, with a scripted model that calls them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.mcp_servers import DESK
from tests.mcp_servers.loopback import BULKY

TOKEN = "tok-asking"
BOOKED = "The desk answered."
COUNTED = "Counted."


def rules(model: str = "scripted") -> dict[str, Any]:
    """The scripted model: ``book it`` calls ``desk.book``, ``count it`` calls ``bulky.steps``
    (1.2 s, a progress report every 0.3 s)."""
    return {
        "name": model,
        "rules": [
            {"when": {"text_contains": "book it"},
             "reply": {"tool_calls": [{"name": "desk.book", "arguments": {"date": "May 3"}}]}},
            {"when": {"tool_result": "desk.book"}, "reply": {"text": BOOKED}},
            {"when": {"text_contains": "count it"},
             "reply": {"tool_calls": [{"name": "bulky.steps",
                                       "arguments": {"seconds": 1.2, "every": 0.3}}]}},
            {"when": {"tool_result": "bulky.steps"}, "reply": {"text": COUNTED}},
        ],
        "default": {"echo": True},
    }


def config(folder: Path, model: str = "scripted") -> list[str]:
    """Writes the config file (the two MCP servers) and the model's rules into ``folder``;
    the options of ``tidings serve`` that use them."""
    desk_dir = folder / "desk"
    desk_dir.mkdir(exist_ok=True)
    toml = folder / "tidings.toml"
    toml.write_text(
        "[mcp.desk]\n"
        f"command = {json.dumps([sys.executable, str(DESK)])}\n"
        f'env = {{ DESK_DIR = {json.dumps(str(desk_dir))}, FASTMCP_LOG_LEVEL = "ERROR" }}\n'
        "\n[mcp.bulky]\n"
        f"command = {json.dumps([sys.executable, str(BULKY)])}\n", "utf-8")
    rules_file = folder / "asking-rules.json"
    rules_file.write_text(json.dumps(rules(model)), "utf-8")
    return ["--config", str(toml), "--model", f"scripted:{rules_file}"]


PROFILE = {"model": "scripted", "tools": ["desk.book", "bulky.steps"]}
"""A conversation that may call both."""
