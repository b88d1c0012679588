"""What the demo's person says and how its scripted model answers (A4: deterministic rules).

The model starts real background commands through the built-in ``shell`` tool, ends its turn,
and answers the notifications and the restart fact the runtime delivers later. Every answer is
chosen by a rule on the newest message (or on the prompt's dynamic suffix), so the run is the
same every time.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import RuntimeConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.tools.registry import Tool, ToolContext
from tidings.turns.runner import TurnConfig
from tidings.types import Profile

OWNER = "alice"
PROFILE = Profile(model="scripted", tools=("shell",))

BUILD_REQUEST = "Please build the release in the background."
STAGING_REQUEST = "Deploy the release to staging in the background."
PRODUCTION_REQUEST = ("Deploy the release to production in the background, then restart the "
                      "runtime to apply the new config.")
BUILD_COMMAND = (
    f"{shlex.quote(sys.executable)} -c "
    + shlex.quote("import time; time.sleep(1); print('build ok')")
)
DEPLOY_COMMAND = "sleep 30"

STARTED = "Started it in the background; I will tell you when it ends."
BUILD_DONE = "The build finished successfully: build ok."
INTERRUPTED = ("The deploy was interrupted before it finished; its outcome is unknown, so I "
               "will not report it as done.")
RESTARTED = "The runtime restarted as you asked; I am back, and nothing was run twice."

DELEGATION_REQUEST = "Split the release notes between two helpers."
CHANGELOG_BRIEF = "Summarise the changelog for the release notes."
ISSUES_BRIEF = "Summarise the open issues for the release notes."
CHANGELOG_SUMMARY = "12 changes, 2 of them breaking."
ISSUES_SUMMARY = "3 open issues, none blocking."
DELEGATED = "Asked two helpers; I will combine their answers when they report."
COMBINED = "Both helpers reported; the release notes can be written now."
DELEGATION_PROFILE = Profile(model="scripted", tools=("spawn", "pause"))

MODEL = ScriptedModel(
    rules=[
        # Delegation: both children's replies come back as task_result mail, in one turn.
        Rule({"text_contains": "<task_result"}, {"text": COMBINED}),
        Rule({"text_contains": DELEGATION_REQUEST},
             {"tool_calls": [
                 {"name": "spawn", "arguments": {"brief": CHANGELOG_BRIEF, "title": "changelog"}},
                 {"name": "spawn", "arguments": {"brief": ISSUES_BRIEF, "title": "issues"}},
                 {"name": "pause", "arguments": {}}]}),
        Rule({"tool_result": "pause"}, {"text": DELEGATED}),
        Rule({"text_contains": CHANGELOG_BRIEF}, {"text": CHANGELOG_SUMMARY}),
        Rule({"text_contains": ISSUES_BRIEF}, {"text": ISSUES_SUMMARY}),
        Rule({"text_contains": "build the release"},
             {"tool_calls": [{"name": "shell", "arguments": {
                 "command": BUILD_COMMAND, "background": True}}]}),
        Rule({"text_contains": "Deploy the release"},
             {"tool_calls": [{"name": "shell", "arguments": {
                 "command": DEPLOY_COMMAND, "background": True, "timeout_s": 120}}]}),
        # Streamed to watchers piece by piece as it is written (B1).
        Rule({"tool_result": "shell"}, {"text": STARTED, "chunks": 8, "chunk_delay": 0.02}),
        # The restart's completion first: the first turn of the new instance may read it
        # together with the notice of the task the restart interrupted (one turn, both facts).
        Rule({"suffix_contains": "restart_completed"}, {"text": RESTARTED}),
        # Process facts are fenced JSON: a success is stated there, never inferred.
        Rule({"meta_kind": "task_notification", "text_contains": '"succeeded":true'},
             {"text": BUILD_DONE}),
        Rule({"meta_kind": "task_notification"}, {"text": INTERRUPTED}),
    ],
    default={"text": "Noted."},
)


async def _pause(context: ToolContext, arguments: Mapping[str, Any]) -> str:
    """The parent keeps working a moment, so both children answer while its turn runs."""
    await asyncio.sleep(1.0)
    return "paused"


PAUSE = Tool("pause", "Think for a moment.", _pause, read_only=True)


def demo_config() -> RuntimeConfig:
    """Short sweeps and slot leases, so that what a wake-up missed is found within a second."""
    return RuntimeConfig(
        turns=TurnConfig(slot_ttl=timedelta(seconds=5)),
        coordinator=CoordinatorConfig(sweep_interval=timedelta(seconds=1)),
    )
