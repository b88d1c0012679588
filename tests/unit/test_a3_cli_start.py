"""A3: the command line starts without the runtime it may not use. ``import tidings`` brings in
the vocabulary (errors, types, the clock) and names the rest on first use; a command reaching a
service over HTTP, or asking for help, never imports the runtime, the web stack or the SDKs --
each of those costs every invocation a share of a second."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("tidings.runtime.root", "tidings.scheduler", "tidings.turns", "tidings.service",
         "fastapi", "psycopg", "mcp", "a2a", "openai", "anthropic")


def _imported_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\nimport json\n"
             "print(json.dumps(sorted(m for m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    modules: list[str] = json.loads(done.stdout.splitlines()[-1])
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_a3_importing_tidings_names_the_runtime_without_importing_it() -> None:
    assert _imported_after("import tidings") == []
    assert "tidings.runtime.root" in _imported_after("import tidings; tidings.Runtime")


def test_a3_the_command_line_loads_without_the_runtime_or_the_web_stack() -> None:
    assert _imported_after("import tidings.cli") == []


def test_a3_the_client_reads_a_service_without_the_web_stack_or_the_runtime() -> None:
    wire = ("tidings.service.schemas", "tidings.service.fields", "tidings.service.problems")
    imported = _imported_after("import tidings.client")
    assert [m for m in imported if m != "tidings.service" and not m.startswith(wire)] == []
