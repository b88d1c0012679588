"""A stock AG-UI client for the tests: ``@ag-ui/client`` from npm (its ``HttpAgent``) under
Node, driven by ``client.mjs`` beside this file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

AGUI_CLIENT_VERSION = "1.0.0"
NPM_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "npm-agui"
SCRIPT = Path(__file__).with_name("client.mjs")


def agui_client() -> Path:
    """The npm prefix ``@ag-ui/client`` is installed under (``.cache/npm-agui``), installed
    there the first time."""
    package = NPM_CACHE / "node_modules" / "@ag-ui" / "client" / "package.json"
    if not package.exists() or json.loads(package.read_text("utf-8"))["version"] != (
            AGUI_CLIENT_VERSION):
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                        str(NPM_CACHE), f"@ag-ui/client@{AGUI_CLIENT_VERSION}"],
                       check=True, timeout=600)
    return NPM_CACHE


def drive(url: str, token: str, thread: str, steps: list[dict[str, Any]], *,
          timeout: float) -> list[dict[str, Any]]:
    """Run ``client.mjs`` over ``steps`` against the AG-UI endpoint at ``url``: the JSON
    lines it printed (one per event the agent saw, one per step's end)."""
    ran = subprocess.run(
        ["node", str(SCRIPT), str(agui_client()), url, token, thread, json.dumps(steps)],
        capture_output=True, text=True, timeout=timeout, check=False)
    assert ran.returncode == 0, ran.stderr
    return [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
