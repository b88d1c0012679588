"""The built-in ``shell`` tool (A5, T1): run a command in the foreground with a timeout, or start
it as a background task whose end comes back as a notification.

Foreground: the tool waits (bounded by ``timeout_s``) and returns the exit facts and a bounded
excerpt of stdout and stderr; where the excerpt leaves output out it says so, how much, and how
to keep it whole. Background: it returns the ``task_key`` at once; the process's end is
journalled, its output sealed as a result envelope (whole up to the envelope's bound), and the
conversation told at a safe point.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from tidings.errors import InvalidInputError
from tidings.tasks.capture import excerpt
from tidings.tasks.service import BackgroundTasks
from tidings.tasks.supervisor import ProcessSpec, Supervisor
from tidings.tools.registry import Tool, ToolContext, ToolOutput

MAX_TIMEOUT_S = 3600.0
FOREGROUND_EXCERPT_BYTES = 8 * 1024
FOREGROUND_CAPTURE_BYTES = 64 * 1024  # only an excerpt is shown: no need to hold more

PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "A shell command line."},
        "background": {
            "type": "boolean",
            "description": "Start it as a background task and return its task_key at once.",
        },
        "timeout_s": {"type": "number", "description": "Seconds before it is killed."},
        "lifetime": {
            "type": "string",
            "enum": ["conversation", "turn"],
            "description": (
                "Background only. conversation (default): its end comes back later, in a turn "
                "of its own. turn: this turn waits for it before its reply is final."
            ),
        },
    },
    "required": ["command"],
}


def shell_tool(supervisor: Supervisor, tasks: BackgroundTasks) -> Tool:
    async def run(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise InvalidInputError("command must be a non-empty string")
        timeout_s = arguments.get("timeout_s", 600 if arguments.get("background") else 60)
        if not isinstance(timeout_s, int | float) or not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise InvalidInputError(f"timeout_s must be between 0 and {MAX_TIMEOUT_S:.0f}")
        spec = ProcessSpec(command=command, shell=True,
                           timeout=timedelta(seconds=float(timeout_s)),
                           capture_limit_bytes=FOREGROUND_CAPTURE_BYTES)
        lifetime = arguments.get("lifetime", "conversation")
        if lifetime not in ("conversation", "turn"):
            raise InvalidInputError("lifetime must be 'conversation' or 'turn'")
        if arguments.get("background"):
            started = await tasks.start(context, spec, lifetime=lifetime)
            when = "when it ends" if lifetime == "conversation" else "before this turn ends"
            return ToolOutput(
                f"started background task {started.task_key}; you will be told {when}",
                meta={"task_key": started.task_key, "lifetime": lifetime},
            )
        running = await supervisor.start(spec, task_key=f"fg-{context.run_id}-{context.call_id}")
        try:
            outcome = await running.wait()
        except BaseException:
            running.kill()  # the turn was stopped: the foreground process goes with it
            raise
        shown, shortened = excerpt(outcome.stdout, outcome.stderr, FOREGROUND_EXCERPT_BYTES)
        status = (
            f"exit {outcome.exit_code}" if outcome.exit_code is not None
            else outcome.state.value + (f" ({outcome.signal_name})" if outcome.signal else "")
        )
        text = f"{status}\n{shown.decode('utf-8', 'replace')}"
        if shortened:
            text += (
                f"\n[output shortened to {FOREGROUND_EXCERPT_BYTES:,} bytes, as marked above: "
                f"it wrote {outcome.stdout.total_bytes:,} bytes to stdout and "
                f"{outcome.stderr.total_bytes:,} to stderr. To keep the whole output (up to "
                f"{tasks.output_limit_bytes():,} bytes), run it with background: true and read "
                "it with task_output.]"
            )
        return ToolOutput(text, is_error=not outcome.succeeded)

    return Tool("shell", "Run a shell command (foreground, or as a background task).", run,
                parameters=PARAMETERS)
